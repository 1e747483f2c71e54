"""``memhoncho bench recall``: what a recall tool call costs the model, by path.

Each tool is called against the Honcho stand-in in process, then through a real recall worker on
the embedded broker, then on the bench's own Redis (``bench.own_redis``) when there is one:
p50/p99 latency in milliseconds per tool and path. Each remember stores a new conclusion (the
same one again would be answered as its retry, stored once, and measure only that). The stand-in
answers in well under a millisecond, so the figures are memhoncho's and the broker's overhead,
not Honcho's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memhoncho.bench.figures import percentile
from memhoncho.bench.own_redis import bench_redis
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, initialise
from memhoncho.honcho import adapter
from memhoncho.recall import tools
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.seed import seed_conversation
from memhoncho.worker import routing

DEFAULT_SAMPLES = 30  # calls per tool and path
SEEDED_MESSAGES = 200  # the user's messages in the seeded conversation
OWNER = "bench@example.com"
CONVERSATION = "bench-conversation"
WORKSPACE = "memhoncho-bench"
KEY = "bench-key"  # the stand-in accepts any key
CALLS: list[tuple[str, dict[str, Any]]] = [
    (tools.SEARCH, {"query": "knee"}),
    (tools.CHAT, {"query": "What hurts?", "reasoning_level": "minimal"}),
    (tools.REMEMBER, {"content": "The knee hurts.", "conversation_id": CONVERSATION}),
]


def _measure(call: Callable[[str, dict[str, Any]], Any], samples: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name, arguments in CALLS:
        call(name, _sample(name, arguments))  # warm: clients, connections, the first import
        latencies = []
        for _ in range(samples):
            sample = _sample(name, arguments)
            start = time.perf_counter()
            call(name, sample)
            latencies.append((time.perf_counter() - start) * 1000)
        figures[name] = {
            "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2),
        }
    return figures


def _sample(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The call to time: a remember gets content of its own (see the module docstring)."""
    if name != tools.REMEMBER:
        return arguments
    return {**arguments, "content": f"{arguments['content']} ({uuid.uuid4().hex[:8]})"}


def _configure(config_dir: Path, base_url: str, broker_url: str | None) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {"base_url": base_url, "workspace_id": WORKSPACE}
    if broker_url:
        values["broker_url"] = broker_url
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(values))
    (config_dir / "secrets.json").write_text(json.dumps({"api-key": KEY}))


def _via_worker(config_dir: Path, data_dir: Path, samples: int) -> dict[str, Any]:
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    with (
        CeleryProcess("worker", env, queues=[routing.RECALL_QUEUE]),
        Host(config_dir, data_dir) as host,
    ):
        return _measure(
            lambda name, arguments: host.call_tool(name, arguments, owner=OWNER, via="celery"),
            samples,
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    results: dict[str, Any] = {"samples": samples, "seeded_messages": SEEDED_MESSAGES, "paths": {}}
    with (
        HonchoStandIn(llm=True) as standin,
        tempfile.TemporaryDirectory(prefix="memhoncho-bench-recall-") as tmp,
    ):
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        _configure(config_dir, standin.url, None)
        deployment = Deployment(config_dir, data_dir)
        initialise(data_dir)  # as `memhoncho init`: the worker refuses a new folder
        texts = [f"message {i}: my knee hurts after run {i}" for i in range(SEEDED_MESSAGES)]
        seed_conversation(deployment, CONVERSATION, OWNER, texts)
        results["paths"]["in_process"] = _measure(
            lambda name, arguments: tools.call_tool(deployment, name, arguments, OWNER), samples
        )
        results["paths"]["celery_embedded_broker"] = _via_worker(config_dir, data_dir, samples)
        with bench_redis() as redis:
            if redis.url:
                _configure(config_dir, standin.url, redis.url)
                results["paths"]["celery_redis"] = _via_worker(config_dir, data_dir, samples)
            else:
                results["paths"]["celery_redis"] = {"skipped": redis.reason}
        adapter.close_clients()
    return results
