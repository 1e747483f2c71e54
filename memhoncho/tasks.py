"""Thin Celery tasks: take ids, call a service function, map its error to retry or give up.

Each task has an explicit wire name; ``routing.TASK_QUEUES`` says where it goes. Services never
import this module.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from celery import signals

from memhoncho.celery_app import app
from memhoncho.deployment import Deployment
from memhoncho.results import store as results

log = logging.getLogger(__name__)


def task_context() -> Deployment:
    """The dirs the app was built for (from ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR``)."""
    return Deployment.from_dirs(app.conf.memhoncho_config_dir, app.conf.memhoncho_data_dir)


@signals.worker_process_init.connect(weak=False, dispatch_uid="memhoncho.tasks.process_init")
def _fresh_honcho_clients(**_: Any) -> None:
    """Each pool process builds its own Honcho clients, lazily; none is inherited."""
    from memhoncho.honcho import adapter

    adapter.close_clients()  # in a fresh child: drops the parent's, closes nothing of theirs


@signals.worker_process_shutdown.connect(weak=False, dispatch_uid="memhoncho.tasks.process_end")
def _close_honcho_clients(**_: Any) -> None:
    from memhoncho.honcho import adapter

    adapter.close_clients()


# ---- delivery ----------------------------------------------------------------------------

LOCK_RETRY_S = 0.5  # seconds (jittered 0.5x..1.5x): another worker holds the conversation
FORK_RETRY_S = 5.0  # seconds (jittered): a fork waits for its parent's delivery
#: seconds at most added to a fence's wait, so retries of many fenced marks spread out
FENCE_SLACK_S = 0.25
#: Honcho failures in a row with no message delivered between them before the hint is
#: dropped (the records stay pending; the sweep re-drives them)
DELIVER_MAX_FAILURES = 20


def _jittered(seconds: float) -> float:
    return seconds * random.uniform(0.5, 1.5)


# At least once (acks_late, requeued when a worker dies): delivery is idempotent by design.
@app.task(name="memhoncho.deliver", bind=True, ignore_result=True, acks_late=True, max_retries=None)
def deliver(
    self: Any, conversation_id: str, failures: int = 0, held: int = -1
) -> dict[str, Any] | None:
    """Deliver the conversation's pending records (``delivery.deliver_conversation``).

    ``failures``: Honcho failures in a row so far; ``held``: the ledger's delivered-message
    count at the last one (progress since then starts the count again).
    """
    from memhoncho.delivery import engine as delivery
    from memhoncho.errors import (
        ForkWaiting,
        HonchoFailure,
        InFlightSettling,
        LockBusy,
        MemhonchoError,
    )
    from memhoncho.honcho import adapter

    deployment = task_context()
    try:
        report = delivery.deliver_conversation(deployment, conversation_id)
    except InFlightSettling as exc:  # back when the fence opens; the failure count carries on
        countdown = exc.wait_s + random.uniform(0.0, FENCE_SLACK_S)
        kwargs = {"failures": failures, "held": held}
        raise self.retry(countdown=countdown, kwargs=kwargs) from None
    except ForkWaiting:
        raise self.retry(countdown=_jittered(FORK_RETRY_S)) from None
    except LockBusy:
        raise self.retry(countdown=_jittered(LOCK_RETRY_S)) from None
    except HonchoFailure as exc:
        now_held = delivery.messages_delivered(deployment, conversation_id)
        failures = 1 if now_held > held else failures + 1
        decision = adapter.classify(exc, failures)
        if decision.retry and failures < DELIVER_MAX_FAILURES:
            countdown = decision.delay_s if decision.delay_s is not None else LOCK_RETRY_S
            retry_kwargs = {"failures": failures, "held": now_held}
            raise self.retry(countdown=countdown, kwargs=retry_kwargs) from None
        log.warning(
            "delivery stopped; the records stay pending for the sweep",
            extra={"action": "delivery_gave_up", "code": exc.code, "failures": failures},
        )
        results.gave_up(self, exc)
        return None
    except MemhonchoError as exc:  # no key, a bad id, a store error: nothing to retry now
        log.warning(
            "delivery not possible now; the records stay pending for the sweep",
            extra={"action": "delivery_skipped", "code": exc.code},
        )
        results.gave_up(self, exc)
        return None
    if report.state == delivery.DeliveryState.MORE:
        app.send_task("memhoncho.deliver", args=[conversation_id], ignore_result=True)
    if report.first_delivery:
        app.send_task(
            "memhoncho.refresh_representation", args=[conversation_id], ignore_result=True
        )
    return {
        "state": str(report.state),
        "messages": report.delivered_messages + report.recovered_messages,
        "calls": report.calls,
    }


# At most once (acks_late off): a recall nobody waits for any more must not run twice, and a
# remember must not store its conclusion twice. The host's wait and the task's expiry agree.
@app.task(name="memhoncho.recall", ignore_result=False, acks_late=False)
def recall(name: str, arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """Run one recall tool for a waiting host; answers ``{"ok", "result" | "error"}``."""
    from memhoncho.recall import tools

    return tools.outcome(task_context(), name, arguments, owner)


# ---- beat: the outbox sweep and the representation refresh ------------------------------

REFRESH_MAX_RETRIES = 5  # a refresh that keeps failing waits for the next beat instead


def _send_delivery(conversation_id: str) -> bool:
    app.send_task("memhoncho.deliver", args=[conversation_id], ignore_result=True)
    return True


@app.task(name="memhoncho.outbox_sweep", ignore_result=True)
def outbox_sweep() -> dict[str, Any]:
    """Resolve forks, re-drive pending deliveries, compact the outboxes (``sweep.sweep``)."""
    from memhoncho.upkeep import sweep

    report = sweep.sweep(task_context(), _send_delivery)
    return report.model_dump(mode="json", exclude={"conversations"})


@app.task(name="memhoncho.refresh_representations", ignore_result=True)
def refresh_representations() -> int:
    """Enqueue a refresh of every recently delivered conversation whose snapshot is old."""
    from memhoncho import memory

    due = memory.refresh_due(task_context())
    for conversation_id in due:
        app.send_task(
            "memhoncho.refresh_representation", args=[conversation_id], ignore_result=True
        )
    return len(due)


@app.task(
    name="memhoncho.refresh_representation",
    bind=True,
    ignore_result=True,
    max_retries=REFRESH_MAX_RETRIES,
)
def refresh_representation(self: Any, conversation_id: str) -> None:
    """Fetch one conversation's representation and session context into its cache file."""
    from memhoncho import memory
    from memhoncho.errors import MemhonchoError
    from memhoncho.honcho import adapter

    try:
        memory.refresh_representation(task_context(), conversation_id)
    except MemhonchoError as exc:
        decision = adapter.classify(exc, self.request.retries + 1)
        if decision.retry and self.request.retries < REFRESH_MAX_RETRIES:
            raise self.retry(countdown=decision.delay_s or 1.0) from None
        log.warning(
            "representation refresh gave up; the next beat tries again",
            extra={"action": "refresh_gave_up", "code": exc.code},
        )
        results.gave_up(self, exc)
