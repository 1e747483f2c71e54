"""``memhoncho bench capture``: Host.capture against the bare floor it cannot beat.

Both are measured in the same run, interleaved sample by sample: ``Host.capture`` of a typical
run with an API key and a live broker (the bench's own Redis, ``bench.own_redis``, when there is
one, else the embedded filesystem broker), and the floor: append + fsync of the same line to a
file, then one kombu publish of the same bytes on the same broker, on the default exchange
straight to its queue as Celery publishes a task (a named exchange costs a second round trip, a
binding lookup, that the capture's publish does not make; that floor is measured beside it as
``floor_named_exchange``). Their ratio is the price of
everything memhoncho adds (validation, lock, ledger check, routing, the Celery message). Goal:
<= 1.2. Each sample is a capture that publishes (its conversation's hint mark taken first, as a
delivery does) and then one made while that hint waits (``capture_coalesced``: no publish at
all). A second Host with a broker that is down shows that capture does not wait on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from kombu import Connection, Exchange, Producer, Queue

from memhoncho import ids
from memhoncho.bench.figures import latency_figures
from memhoncho.bench.own_redis import bench_redis
from memhoncho.capture.host import Host
from memhoncho.settings import SECRETS_FILE, SETTINGS_FILE
from memhoncho.store import hint_marks
from memhoncho.testing.ports import free_port

DEFAULT_SAMPLES = 1000
WARMUP = 100  # captures before measuring (imports, connections, caches)
BROKER_DOWN_SAMPLES = 200
FLOOR_QUEUE = "memhoncho-bench-floor"
CONVERSATION = "bench-conversation"
INLINE_CONVERSATION = "bench-conversation-inline"  # the inline host's, in the same data dir
USER_TEXT = "How should I plan the garden beds for next spring? " * 10  # ~500 characters
ANSWER_TEXT = "Start with the soil: test it, then add compost where it is thin. " * 25
BENCH_KEY = "bench-api-key"  # a stand-in key: nothing calls Honcho here

T = TypeVar("T")


def _run(i: int, conversation_id: str = CONVERSATION) -> dict[str, Any]:
    return {
        "conversation_id": conversation_id,
        "owner": "ana@example.com",
        "run_id": f"run-{i}",
        "inputs": [{"entry_id": 2 * i, "text": USER_TEXT}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 2 * i + 1, "content": [{"type": "text", "text": ANSWER_TEXT}]},
        },
    }


def _config(root: Path, broker_url: str | None) -> Path:
    config = root / "config"
    (config / SETTINGS_FILE).parent.mkdir(parents=True, exist_ok=True)
    values = {"broker_url": broker_url, "max_pending_batches": 10**9}  # nothing delivers here
    (config / SETTINGS_FILE).write_text(json.dumps(values), encoding="utf-8")
    (config / SECRETS_FILE).write_text(json.dumps({"api-key": BENCH_KEY}), encoding="utf-8")
    return config


def _timed(action: Callable[[], T]) -> tuple[float, T]:
    """Milliseconds the action took, and what it returned."""
    start = time.perf_counter()
    result = action()
    return (time.perf_counter() - start) * 1000, result


class _Floor:
    """The least any durable capture must do: append + fsync, and one publish."""

    def __init__(self, path: Path, url: str, options: dict[str, Any]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.connection = Connection(url, transport_options=options)
        self.exchange = Exchange(FLOOR_QUEUE, type="direct")
        queue = Queue(FLOOR_QUEUE, self.exchange, routing_key=FLOOR_QUEUE)
        queue(self.connection.default_channel).declare()
        self.producer = Producer(self.connection)

    def __call__(self, line: bytes, exchange: str = "") -> None:
        os.write(self.fd, line)
        os.fsync(self.fd)
        self.producer.publish(
            line,
            # the default exchange, straight to the queue, as Celery publishes; the named one
            # is the floor before 2026-12-03 (``floor_named_exchange``)
            exchange=exchange,
            routing_key=FLOOR_QUEUE,
            content_type="application/octet-stream",
            content_encoding="binary",
            retry=False,
        )

    def close(self) -> None:
        os.close(self.fd)
        self.connection.close()


def _last_line(host: Host) -> bytes:
    path = host.deployment.layout.outbox(ids.conversation_key(CONVERSATION))
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - 64 * 1024))
        return handle.read().splitlines(keepends=True)[-1]


def _measure(samples: int, root: Path, broker_url: str | None) -> dict[str, Any]:
    config = _config(root, broker_url)
    host = Host(config_dir=config, data_dir=root / "data", init=True)
    # The same capture with its hint published on the capturing thread after the fsync, as
    # the floor does, instead of on a hint thread beside it: both in every sample.
    inline = Host(config_dir=config, data_dir=root / "data", inline_hints=True)
    url = broker_url or "filesystem://"
    options: dict[str, Any] = dict(host.celery().conf.broker_transport_options or {})
    floor = _Floor(root / "floor.jsonl", url, options)
    layout, key = host.deployment.layout, ids.conversation_key(CONVERSATION)
    inline_key = ids.conversation_key(INLINE_CONVERSATION)
    capture_ms: list[float] = []
    inline_ms: list[float] = []
    coalesced_ms: list[float] = []
    floor_ms: list[float] = []
    named_ms: list[float] = []
    enqueued = enqueued_inline = 0
    line = b""
    try:
        for i in range(WARMUP):
            hint_marks.taken(layout, key)
            host.capture(_run(i))
            hint_marks.taken(layout, inline_key)
            inline.capture(_run(i, INLINE_CONVERSATION))
            floor(_last_line(host))
        hints_before = host.hints_published
        inline_before = inline.hints_published
        for i in range(WARMUP, WARMUP + samples):
            # As when a delivery took the last hint: this capture publishes (the floor's case).
            hint_marks.taken(layout, key)
            elapsed, result = _timed(partial(host.capture, _run(2 * i)))
            capture_ms.append(elapsed)
            enqueued += result.enqueued
            hint_marks.taken(layout, inline_key)
            elapsed, result = _timed(partial(inline.capture, _run(2 * i, INLINE_CONVERSATION)))
            inline_ms.append(elapsed)
            enqueued_inline += result.enqueued
            line = _last_line(host)  # the same bytes the capture wrote
            floor_ms.append(_timed(partial(floor, line))[0])
            named_ms.append(_timed(partial(floor, line, FLOOR_QUEUE))[0])
            # As while that hint still waits: this capture publishes nothing.
            coalesced_ms.append(_timed(partial(host.capture, _run(2 * i + 1)))[0])
        hints = host.hints_published - hints_before
        hints_inline = inline.hints_published - inline_before
    finally:
        floor.close()
        inline.close()
        host.close()
    capture, capture_inline, bare, coalesced, named = (
        latency_figures(capture_ms),
        latency_figures(inline_ms),
        latency_figures(floor_ms),
        latency_figures(coalesced_ms),
        latency_figures(named_ms),
    )
    return {
        "capture": capture,
        "floor": bare,
        "ratio_p50": round(capture["p50_ms"] / bare["p50_ms"], 3),
        "ratio_p99": round(capture["p99_ms"] / bare["p99_ms"], 3),
        # The hint published on the capturing thread after the fsync (``inline_hints``)
        "capture_inline": capture_inline,
        "inline_ratio_p50": round(capture_inline["p50_ms"] / bare["p50_ms"], 3),
        "capture_coalesced": coalesced,
        "coalesced_ratio_p50": round(coalesced["p50_ms"] / bare["p50_ms"], 3),
        # The floor as it was measured until 2026-12-03: a named exchange, a binding lookup
        # more per publish on Redis; the "0.3 ms regression" of issue 33 is this difference.
        "floor_named_exchange": named,
        "ratio_p50_named_exchange": round(capture["p50_ms"] / named["p50_ms"], 3),
        "enqueued": enqueued,
        "hints_published": hints,
        "enqueued_inline": enqueued_inline,
        "hints_published_inline": hints_inline,
        "captures": 2 * samples,
        "line_bytes": len(line),
    }


def _broker_down(samples: int, root: Path) -> dict[str, Any]:
    config = _config(root, f"redis://127.0.0.1:{free_port()}/0")
    latencies: list[float] = []
    enqueued = 0
    host_log = logging.getLogger("memhoncho.capture.hint_sender")
    level = host_log.level
    host_log.setLevel(logging.ERROR)  # the enqueue_failed warning is expected here
    try:
        with Host(config_dir=config, data_dir=root / "data", init=True) as host:
            for i in range(samples):
                elapsed, result = _timed(partial(host.capture, _run(i)))
                latencies.append(elapsed)
                enqueued += result.enqueued
    finally:
        host_log.setLevel(level)
    return {**latency_figures(latencies), "first_ms": round(latencies[0], 3), "enqueued": enqueued}


def _empty(redis_url: str | None) -> None:
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
        try:
            client.flushdb()
        finally:
            client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    for name in ("MEMHONCHO_BROKER_URL", "MEMHONCHO_API_KEY"):
        os.environ.pop(name, None)  # the bench decides the broker and the key
    with bench_redis() as redis:
        return _run_on(args, samples, redis.url or None)


def _run_on(args: argparse.Namespace, samples: int, redis_url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-capture-") as tmp:
        root = Path(tmp)
        (root / "live").mkdir()
        (root / "down").mkdir()
        live = _measure(samples, root / "live", redis_url)
        _empty(redis_url)  # the PostgreSQL part starts from empty queues, as this one did
        down = _broker_down(min(samples, BROKER_DOWN_SAMPLES), root / "down")
    result = {
        "samples": samples,
        "broker": redis_url or "embedded filesystem broker",
        "store": "files",
        **live,
        "goal_ratio": 1.2,
        "broker_down": down,
    }
    store_url = getattr(args, "store", None)
    if store_url:  # the same capture on PostgreSQL, beside a bare INSERT; COMMIT
        from memhoncho.bench.pg import capture_figures

        with tempfile.TemporaryDirectory(prefix="memhoncho-bench-capture-pg-") as tmp:
            result["postgresql"] = capture_figures(
                store_url, Path(tmp), samples, WARMUP, redis_url, _run, BENCH_KEY
            )
            result["postgresql"]["hints"] = _pg_hint_share(
                store_url, Path(tmp) / "hints", samples, redis_url
            )
    return result


def _pg_hint_share(
    server_url: str, root: Path, samples: int, broker_url: str | None
) -> dict[str, Any]:
    """On PostgreSQL, the captures that publish a hint: each sample's first capture after a
    delivery took the mark (it must publish), then one while that hint waits (it must not)."""
    from memhoncho.bench.pg import deployment_on, scratch_database
    from memhoncho.store.postgres import PostgresStore
    from memhoncho.testing.config import write_api_key

    with scratch_database(server_url) as url:
        deployment = deployment_on(root, url, broker_url=broker_url, max_pending_batches=10**9)
        write_api_key(deployment.config_dir, BENCH_KEY)
        store = deployment.store()
        assert isinstance(store, PostgresStore)
        key = ids.conversation_key(CONVERSATION)
        after_take = while_waiting = 0
        with Host(deployment.config_dir, deployment.data_dir) as host:
            for i in range(samples):
                store.take_hint(key)  # as a delivery starting does
                before = host.hints_published
                host.capture(_run(2 * i))
                after_take += host.hints_published - before
                before = host.hints_published
                host.capture(_run(2 * i + 1))
                while_waiting += host.hints_published - before
    return {
        "captures_after_a_take": samples,
        "published_after_a_take": after_take,
        "captures_while_a_hint_waits": samples,
        "published_while_a_hint_waits": while_waiting,
        "share_published_while_a_hint_waits": round(while_waiting / samples, 4),
    }
