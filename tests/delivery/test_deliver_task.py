"""The delivery task as a worker runs it (eagerly here: a retry runs again at once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

import memhoncho.worker.tasks  # noqa: F401  (its shared tasks bind to the app built below)
from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.celery_app import create_app
from memhoncho.deployment import Deployment
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.runs import run_event
from memhoncho.worker import routing
from memhoncho.worker.tasks import DELIVER_MAX_FAILURES

KEY = "sk-deliver-task-key"
CONVERSATION = "conv-task"
pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> dict[str, Any]:
    # Eager retries ignore countdowns, so a fenced retry would come back before its fence
    # opens: the fence is off here, where what is tested is the count of failures.
    return point_at_standin(config_dir, standin, workspace_id, KEY, send_fence=False)


@pytest.fixture
def app(deployment: Deployment) -> Iterator[Celery]:
    built = create_app(deployment)
    yield built
    built.close()


def test_a_retry_queued_by_an_earlier_version_with_its_failure_counters_still_runs(
    app: Celery,
) -> None:
    # Earlier versions carried ``failures`` and ``held`` in the retry's kwargs; the ledger
    # counts the failures now, and a message already queued must not fail on its arguments.
    result = app.tasks[routing.DELIVER_TASK].apply(
        args=["conv-1"], kwargs={"failures": 3, "held": 5}
    )

    assert result.successful(), result.traceback
    assert result.get() == {"state": "idle", "messages": 0, "calls": 0}


def test_delivery_gives_up_after_its_limit_of_honcho_failures_and_the_records_stay_pending(
    app: Celery, host: Host, deployment: Deployment, standin: HonchoStandIn
) -> None:
    host.capture(run_event(CONVERSATION, 0, "ana@example.com"))
    failing = standin.faults.add("http_503", path_contains="/messages", count=None)

    result = app.tasks[routing.DELIVER_TASK].apply(args=[CONVERSATION])

    assert result.successful(), result.traceback
    assert result.get() is None  # gave up: no report
    ledger = read_ledger(deployment.layout, ids.conversation_key(CONVERSATION))
    assert ledger is not None
    assert ledger.failures == DELIVER_MAX_FAILURES
    assert ledger.delivered_seq == 0 and ledger.messages_delivered == 0
    assert failing.fired >= DELIVER_MAX_FAILURES


def test_delivery_retries_while_the_store_database_is_unreachable_then_leaves_it_to_the_sweep(
    app: Celery, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memhoncho.delivery import engine
    from memhoncho.errors import StoreUnavailable
    from memhoncho.worker import tasks

    attempts: list[str] = []

    def unreachable(deployment: Deployment, conversation_id: str) -> None:
        attempts.append(conversation_id)
        raise StoreUnavailable()

    monkeypatch.setattr(engine, "deliver_conversation", unreachable)
    monkeypatch.setattr(tasks, "STORE_MAX_RETRIES", 3)

    result = app.tasks[routing.DELIVER_TASK].apply(args=[CONVERSATION])

    assert result.successful(), result.traceback
    assert result.get() is None  # gave up after its retries; the records wait in the store
    assert attempts == [CONVERSATION] * 4


def test_a_failed_delivery_leaves_its_retry_to_a_hint_that_already_waits(
    app: Celery,
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One retrying hint a conversation: a capture made while the delivery failed published a
    # hint of its own (the delivery had taken the mark), and that hint carries the retry; the
    # failed task does not start a second chain beside it.
    from memhoncho.delivery import engine

    host.capture(run_event(CONVERSATION, 0, "ana@example.com"))
    standin.faults.add("http_503", path_contains="/messages", count=None)
    real = engine.deliver_conversation
    attempts: list[int] = []

    def fails_while_a_capture_comes(deployment: Deployment, conversation_id: str) -> Any:
        attempts.append(len(attempts))
        try:
            return real(deployment, conversation_id)
        finally:
            if len(attempts) == 2:  # during the second attempt: its hint now waits
                host.capture(run_event(CONVERSATION, 1, "ana@example.com"))

    monkeypatch.setattr(engine, "deliver_conversation", fails_while_a_capture_comes)

    result = app.tasks[routing.DELIVER_TASK].apply(args=[CONVERSATION])

    assert result.successful(), result.traceback
    assert result.get() is None  # ended: the capture's hint delivers, or retries, instead
    assert len(attempts) == 2  # retried once (no hint waited), then left it to the hint
    ledger = read_ledger(deployment.layout, ids.conversation_key(CONVERSATION))
    assert ledger is not None and ledger.failures == 2
    assert not deployment.store().claim_hint(ids.conversation_key(CONVERSATION))  # it waits
