"""The status view with real tasks behind it, and a warm worker shutdown during a delivery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.status.view import status_view
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.processes import CeleryProcess, standin_env, wait_until
from memhoncho.testing.runs import answered_run
from memhoncho.worker import routing

KEY = "sk-status-workers-key"
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]
CONVERSATION = "status-c1"


def _run(run: str) -> dict[str, Any]:
    return answered_run(CONVERSATION, run)


@pytest.fixture
def env(
    config_dir: Path, data_dir: Path, redis_url: str, standin: HonchoStandIn, workspace_id: str
) -> dict[str, str]:
    point_at_standin(
        config_dir, standin, workspace_id, KEY, broker_url=redis_url, honcho_timeout_s=5.0
    )
    return standin_env(config_dir, data_dir, redis_url, standin, workspace_id)


def _queues() -> list[str]:
    return [routing.deliver_queue(CONVERSATION, 8), routing.MAINTENANCE_QUEUE]


def _deliver_task(view: dict[str, Any]) -> dict[str, Any]:
    return dict((view["tasks"].get("tasks") or {}).get("memhoncho.deliver") or {})


def test_a_failing_honcho_shows_in_failures_and_pending_age_then_clears(
    config_dir: Path, data_dir: Path, env: dict[str, str], standin: HonchoStandIn, workspace_id: str
) -> None:
    deployment = Deployment(config_dir, data_dir)
    standin.faults.add("http_503", count=None, path_contains="/messages", method="POST")
    with CeleryProcess("worker", env, queues=_queues()), Host(config_dir, data_dir) as host:
        assert host.capture(_run("r1")).enqueued
        assert host.capture(_run("r2")).enqueued
        failing = wait_until(
            lambda: (
                (v := status_view(deployment))
                and _deliver_task(v).get("consecutive_failures", 0) >= 2
                and v
            ),
            "two failed deliveries",
        )
        task = _deliver_task(failing)
        assert task["last_error_code"] == "ERR_HONCHO_UNAVAILABLE"
        assert task["last_error_at"] >= task["last_start_at"] - 1
        assert failing["outbox"]["pending_batches"] == 2
        assert failing["outbox"]["pending_messages"] == 4
        assert failing["outbox"]["oldest_pending_age_s"] > 0
        assert failing["last_delivery_at"] is None
        later = status_view(deployment)
        assert later["outbox"]["oldest_pending_age_s"] >= failing["outbox"]["oldest_pending_age_s"]
        assert KEY not in json.dumps(later) and "user text" not in json.dumps(later)

        standin.faults.clear()
        host.enqueue_delivery(CONVERSATION)
        healthy = wait_until(
            lambda: (v := status_view(deployment)) and v["outbox"]["pending_batches"] == 0 and v,
            "the backlog to drain",
        )
        healthy = wait_until(
            lambda: (
                (v := status_view(deployment))
                and _deliver_task(v).get("consecutive_failures") == 0
                and v
            ),
            "a successful delivery",
        )
    assert healthy["outbox"]["oldest_pending_age_s"] == 0
    assert healthy["last_delivery_at"] is not None
    assert healthy["ledgers"]["honcho_sessions"] == 1
    assert _deliver_task(healthy)["succeeded"] >= 1
    assert len(standin.messages(workspace_id, ids.session_id(workspace_id, CONVERSATION))) == 4


def test_a_worker_stopped_with_sigterm_mid_delivery_finishes_it(
    config_dir: Path, data_dir: Path, env: dict[str, str], standin: HonchoStandIn, workspace_id: str
) -> None:
    standin.faults.add(
        "latency_ms", count=None, latency_ms=2000, path_contains="/messages", method="POST"
    )
    key = ids.conversation_key(CONVERSATION)
    worker = CeleryProcess("worker", env, queues=_queues()).start()
    try:
        with Host(config_dir, data_dir) as host:
            assert host.capture(_run("r1")).enqueued
            wait_until(
                lambda: (ledger := read_ledger(host.deployment.layout, key)) and ledger.in_flight,
                "the send to begin",
            )
        worker.stop()  # SIGTERM: warm shutdown waits for the delivery in progress
    finally:
        worker.stop()
    assert worker.process is not None and worker.process.returncode == 0, worker.log_text()[-3000:]
    texts = [
        m["content"]
        for m in standin.messages(workspace_id, ids.session_id(workspace_id, CONVERSATION))
    ]
    assert texts == ["user text of r1", "answer r1"]
    ledger = read_ledger(Deployment(config_dir, data_dir).layout, key)
    assert ledger is not None and ledger.in_flight == [] and ledger.messages_delivered == 2
