"""``memhoncho bench broker``: the embedded-broker candidates, measured side by side.

For each broker that needs no server on one machine (kombu's filesystem transport; SQLite
through kombu's SQLAlchemy transport when SQLAlchemy is installed) and, for reference, the
bench's own Redis (``bench.own_redis``) when there is one: publish latency of a
delivery-hint-sized message (p50/p99) and the time to drain the queue from a second connection.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kombu import Connection, Exchange, Queue

from memhoncho.bench.figures import percentile
from memhoncho.bench.own_redis import bench_redis
from memhoncho.celery_app import embedded_broker
from memhoncho.worker import routing

DEFAULT_MESSAGES = 500
HINT = {"task": routing.DELIVER_TASK, "args": ["conversation-0001"], "kwargs": {}}


def _measure(url: str, options: dict[str, Any], messages: int) -> dict[str, Any]:
    exchange = Exchange("bench", type="direct")
    queue = Queue(f"bench-{time.monotonic_ns()}", exchange, routing_key="bench")
    latencies: list[float] = []
    with Connection(url, transport_options=options) as producer_conn:
        producer = producer_conn.Producer()
        queue(producer_conn.default_channel).declare()
        for _ in range(messages):
            start = time.perf_counter()
            producer.publish(HINT, exchange=exchange, routing_key="bench", serializer="json")
            latencies.append((time.perf_counter() - start) * 1000)
    received = 0
    start = time.perf_counter()
    with Connection(url, transport_options=options) as consumer_conn:
        simple = consumer_conn.SimpleQueue(queue)
        while received < messages:
            simple.get(timeout=10).ack()
            received += 1
        simple.close()
    drain_s = time.perf_counter() - start
    return {
        "publish_p50_ms": round(statistics.median(latencies), 3),
        "publish_p99_ms": round(percentile(latencies, 0.99), 3),
        "drain_msgs_per_s": round(messages / drain_s, 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    messages = getattr(args, "samples", None) or DEFAULT_MESSAGES
    results: dict[str, Any] = {"messages": messages, "candidates": {}}
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-broker-") as tmp:
        url, options = embedded_broker(Path(tmp))
        options = {**options, "polling_interval": 0.01}
        results["candidates"]["filesystem"] = _measure(url, options, messages)
        if importlib.util.find_spec("sqlalchemy") is not None:
            sqlite_url = f"sqla+sqlite:///{tmp}/broker.sqlite"
            results["candidates"]["sqlite"] = _measure(sqlite_url, {}, messages)
        else:
            results["candidates"]["sqlite"] = {"skipped": "SQLAlchemy is not installed"}
    with bench_redis() as redis:
        reference = "redis (reference, needs a server)"
        if redis.url:
            results["candidates"][reference] = _measure(redis.url, {}, messages)
        else:
            results["candidates"][reference] = {"skipped": redis.reason}
    results["chosen"] = "filesystem"
    return results
