"""``memhoncho bench backlog``: a backlog drains with one hint a conversation, none stranded.

``CONVERSATIONS`` conversations are captured (one run each) while no worker runs, so as many
hints wait in the queues; then one worker (prefork, ``CONCURRENCY`` children) drains them
against the stand-in (its own process), which holds each send ``SEND_LATENCY_MS``. The last
hints wait far longer than ``hint_marks.STALE_S``. Figures per arm: seconds until every
message is in, and until the queues are empty; the delivery tasks the worker received by
then, per conversation (1.0 is one hint each); the conversations the watchdog enqueued again;
the most the status view counted stranded at once (read every ``LOOK_EVERY_S``); messages
stored twice. Arms, in one run: ``before`` (the rule before a queue's depth counted: an old
mark is lost whatever its queue holds, ``bench/backlog_app.py``) and ``after``, on the
bench's own Redis, on RabbitMQ (a private virtual host; ``--broker`` names another server)
and on the embedded broker. ``--samples``: the conversations.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from memhoncho.bench.stranded import _messages, by_broker_and_arm, scratch_deployment
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.testing import StandInControl
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.runs import run_event

CONVERSATIONS = 300
CONCURRENCY = 2
SEND_LATENCY_MS = 100
HONCHO_TIMEOUT_S, SEND_SETTLE_S = 2.0, 2.0
TIMEOUT_S = 300.0  # seconds for the drain before an arm is "incomplete"
LOOK_EVERY_S = 0.5
OWNER = "ana@example.com"
ARMS = {"before": "memhoncho.bench.backlog_app", "after": "memhoncho.celery_app"}


class _Looks:
    """The status view's stranded count, read every ``LOOK_EVERY_S`` as an operator's
    dashboard would, by the rule of the arm (``bench/backlog_app.py`` for ``before``)."""

    def __init__(self, deployment: Deployment, arm: str) -> None:
        self.deployment, self.arm = deployment, arm
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _count(self) -> int:
        from memhoncho.status import stranded as status_stranded
        from memhoncho.store import stranded

        current = self.deployment.settings()
        if self.arm == "before":
            return len(stranded.find(self.deployment.store(), current))
        return int(status_stranded.bucket(self.deployment, current)["count"])

    def _run(self) -> None:
        while not self._stop.wait(LOOK_EVERY_S):
            self.most = max(self.most, self._count())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def _queues_emptied(deployment: Deployment, started: float) -> float | None:
    """Seconds from the worker's start until its queues hold nothing: the hints enqueued
    again behind the backlog are work the worker still takes after the last message is in,
    so they are counted only once they are taken. None: not within ``TIMEOUT_S``."""
    from memhoncho.worker import queue_depths, routing

    current = deployment.settings()
    names = routing.deliver_queues(current.partitions)
    while time.monotonic() - started < TIMEOUT_S:
        if not sum(queue_depths.read(deployment, current, names).values()):
            return round(time.monotonic() - started, 2)
        time.sleep(0.1)
    return None


def _arm(
    standin: StandInControl, broker: str | None, app: str, arm: str, tag: str, count: int
) -> dict[str, Any]:
    workspace = f"bench-backlog-{tag}"
    fence = (HONCHO_TIMEOUT_S, SEND_SETTLE_S)
    with scratch_deployment(
        standin, broker, workspace, latency_ms=SEND_LATENCY_MS, fence=fence
    ) as (config_dir, data_dir):
        with Host(config_dir, data_dir) as host:
            for n in range(count):
                host.capture(run_event(f"conv-{n:04d}", 0, OWNER))
        env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
        worker = CeleryProcess("worker", env, pool="prefork", concurrency=CONCURRENCY)
        worker.args[worker.args.index("memhoncho.celery_app")] = app
        deployment = Deployment(config_dir, data_dir)
        looks = _Looks(deployment, arm)
        started = time.monotonic()
        took: float | None = None
        try:
            worker.start()
            while time.monotonic() - started < TIMEOUT_S:
                if len(_messages(standin, workspace)) >= 2 * count:
                    took = round(time.monotonic() - started, 2)
                    break
                time.sleep(0.1)
            most_stranded = looks.stop()
            emptied = _queues_emptied(deployment, started)
            log = worker.log_text()
        finally:
            looks.stop()
            worker.stop()
            adapter.close_clients()
    received = sum(
        1 for line in log.splitlines() if "memhoncho.deliver[" in line and "] received" in line
    )
    held = _messages(standin, workspace)
    return {
        "drain_s": took,
        "complete": took is not None,
        "queues_empty_s": emptied,
        "deliver_tasks_per_conversation": round(received / count, 2),
        "re_enqueued_by_watchdog": log.count("stranded conversation enqueued"),
        "most_counted_stranded": most_stranded,
        "messages": len(held),
        "twice": len(held) - len(set(held)),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    count = int(getattr(args, "samples", None) or CONVERSATIONS)
    results: dict[str, Any] = {
        "scenario": f"{count} conversations captured with no worker running, then one worker"
        f" (prefork, {CONCURRENCY} children) drains them",
        "send_latency_ms": SEND_LATENCY_MS,
    }
    results["brokers"] = by_broker_and_arm(
        args, lambda standin, url, arm, tag: _arm(standin, url, ARMS[arm], arm, tag, count), ARMS
    )
    return results
