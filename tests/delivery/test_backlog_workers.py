"""A backlog is not mistaken for lost hints: one hint a conversation, none stranded.

60 conversations are captured while no worker runs, so 60 hints wait in the queues; then one
worker with one pool process drains them against a stand-in that takes 300 ms a send. The
last hints wait far longer than ``hint_marks.STALE_S``. The watchdog must not enqueue them
again (each would be a second task for the worker to take) and the status view must not
count them stranded: their queue holds messages (``store/stranded.py``, ``QUEUED_MAX_S``),
and a hint a worker has received renews its mark (``worker/tasks.py``, ``_hint_received``).
Before that rule, each such conversation was enqueued again every look and the view counted
most of the backlog stranded. Real worker processes on Redis, RabbitMQ and the embedded broker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fleet_support import (  # noqa: F401 - _amqp_vhost: a fixture
    _amqp_vhost,
    _purge_amqp,
    assert_each_conversation_complete_in_order_once,
    conversations,
    stored_texts,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.status import stranded as status_stranded
from memhoncho.store import hint_marks, stranded
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, running
from memhoncho.testing.runs import run_event

KEY = "sk-backlog-workers-key"
OWNER = "ana@example.com"
CONVERSATIONS = 60
SEND_LATENCY_MS = 300  # each send's latency: the backlog takes about 20 s to drain
HONCHO_TIMEOUT_S, SEND_SETTLE_S = 2.0, 4.0
DRAIN_TIMEOUT_S = 150.0
LOOK_EVERY_S = 0.5  # how often the test reads the status view's stranded bucket
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


@pytest.fixture(params=["redis", "rabbitmq", "embedded"])
def settings(request: pytest.FixtureRequest, standin_settings: SettingsWriter) -> dict[str, Any]:
    broker_url = None
    if request.param == "redis":
        broker_url = str(request.getfixturevalue("redis_url"))
    elif request.param == "rabbitmq":
        broker_url = str(request.getfixturevalue("_amqp_vhost"))
        _purge_amqp(broker_url)
    places = {"broker_url": broker_url} if broker_url else {}
    return standin_settings(
        honcho_timeout_s=HONCHO_TIMEOUT_S, send_settle_s=SEND_SETTLE_S, **places
    )


class Watch:
    """Reads, every ``LOOK_EVERY_S`` while the backlog drains, the status view's stranded
    count and the oldest waiting hint mark (the files' marks: every param uses the files)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.most_stranded = 0
        self.named: set[str] = set()
        self.oldest_mark_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        current = self.deployment.settings()
        while not self._stop.wait(LOOK_EVERY_S):
            now = time.time()
            marks = hint_marks.marks(self.deployment.layout)
            if marks:
                self.oldest_mark_s = max(self.oldest_mark_s, now - min(marks.values()))
            found = status_stranded.bucket(self.deployment, current, now=now)
            self.most_stranded = max(self.most_stranded, found["count"])
            self.named |= {c["conversation_id"] for c in found["conversations"]}


def _wait_all_in(standin: HonchoStandIn, workspace_id: str, wanted: int) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_TIMEOUT_S:
        if standin.message_count(workspace_id) >= wanted:
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def test_a_backlog_drains_one_hint_a_conversation_and_nothing_counts_stranded(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    names = conversations(CONVERSATIONS)
    for name in names:
        host.capture(run_event(name, 0, OWNER))
    standin.faults.add(
        "latency_ms", latency_ms=SEND_LATENCY_MS, count=None, path_contains="/messages"
    )
    env = memhoncho_env(
        config_dir=deployment.config_dir, data_dir=deployment.data_dir, api_key=None
    )
    worker = CeleryProcess("worker", env, pool="prefork", concurrency=1)
    with running([worker]), Watch(deployment) as watch:
        took = _wait_all_in(standin, workspace_id, CONVERSATIONS * 2)
    log = worker.log_text()
    received = sum(
        1 for line in log.splitlines() if "memhoncho.deliver[" in line and "received" in line
    )
    print(
        f"drained in {took} s; oldest mark {watch.oldest_mark_s:.1f} s; deliver received "
        f"{received}; most stranded {watch.most_stranded} {sorted(watch.named)[:5]}"
    )
    assert took is not None, f"not all in {DRAIN_TIMEOUT_S:.0f} s"
    # The case under test happened: hints waited past the age that used to call them lost.
    assert watch.oldest_mark_s > hint_marks.STALE_S + stranded.SETTLE_S
    assert "stranded conversation enqueued" not in log
    assert received == CONVERSATIONS
    assert watch.most_stranded == 0, sorted(watch.named)
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, 1)
