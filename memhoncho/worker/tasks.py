"""Thin Celery tasks: take ids, call a service function, map its error to retry or give up.

Each task has an explicit wire name from ``routing``, where ``routing.TASK_QUEUES`` says where
it goes. The tasks are shared: they bind to whichever app the process builds
(``celery_app.get_app``), so importing this module builds nothing. Services never import it.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
from collections.abc import Callable
from typing import Any

from celery import shared_task, signals

from memhoncho import results
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError
from memhoncho.worker import routing

log = logging.getLogger(__name__)


def task_context(app: Any) -> Deployment:
    """The dirs ``app`` (the running task's) was built for, from ``MEMHONCHO_CONFIG_DIR`` /
    ``MEMHONCHO_DATA_DIR``. The caller names its app: the tasks never import one."""
    return Deployment.from_dirs(app.conf.memhoncho_config_dir, app.conf.memhoncho_data_dir)


@signals.worker_process_init.connect(weak=False, dispatch_uid="memhoncho.worker.tasks.process_init")
def _fresh_honcho_clients(**_: Any) -> None:
    """Each pool process builds its own Honcho clients, lazily; none is inherited."""
    from memhoncho.honcho import adapter

    adapter.close_clients()  # in a fresh child: drops the parent's, closes nothing of theirs


@signals.worker_process_shutdown.connect(
    weak=False, dispatch_uid="memhoncho.worker.tasks.process_end"
)
def _close_honcho_clients(**_: Any) -> None:
    from memhoncho.honcho import adapter

    adapter.close_clients()


@signals.task_received.connect(weak=False, dispatch_uid="memhoncho.worker.tasks.hint_received")
def _hint_received(request: Any = None, **_: Any) -> None:
    """A delivery hint left its queue for this worker: its mark's age counts from now.

    In the worker's main process, as the message arrives. The task may wait for a free pool
    process yet, shown neither in the queue's depth nor by a held lock, so without this the
    stranded look (``store/stranded.py``) would call its mark lost. A retry with an ETA is
    left alone: it waits by design, and its conversation's own bound covers it. The renew
    runs on a thread of its own: on PostgreSQL it is a statement, and a database out of reach
    must not hold up the consumer's loop for its connect timeout."""
    if request is None or request.name != routing.DELIVER_TASK or request.eta:
        return
    try:
        conversation_id = request.args[0]
        deployment = task_context(request.app)
    except Exception:  # noqa: BLE001 - not a hint of ours: nothing to renew
        return
    _renewals().put((deployment, conversation_id))


_renewal_queue: tuple[int, queue.SimpleQueue[tuple[Deployment, str]]] | None = None


def _renewals() -> queue.SimpleQueue[tuple[Deployment, str]]:
    """This process's renewal queue and its one daemon thread (a forked process makes its
    own; a daemon, so a database out of reach never holds up the worker's exit)."""
    global _renewal_queue
    if _renewal_queue is None or _renewal_queue[0] != os.getpid():
        waiting: queue.SimpleQueue[tuple[Deployment, str]] = queue.SimpleQueue()
        threading.Thread(
            target=_renew_forever, args=(waiting,), name="memhoncho-renew", daemon=True
        ).start()
        _renewal_queue = (os.getpid(), waiting)
    return _renewal_queue[1]


def _renew_forever(waiting: queue.SimpleQueue[tuple[Deployment, str]]) -> None:
    while True:
        _renew_mark(*waiting.get())


def _renew_mark(deployment: Deployment, conversation_id: str) -> None:
    from memhoncho import ids

    try:
        key = ids.conversation_key(conversation_id)
        deployment.store().renew_hint(key)
    except Exception:  # noqa: BLE001 - an economy: without it a mark may look lost sooner
        log.debug("hint mark not renewed", extra={"action": "hint_renew_failed"})


def _retry_or_give_up(
    task: Any,
    exc: MemhonchoError,
    *,
    attempt: int,
    max_attempts: int,
    default_delay_s: float,
    action: str,
    message: str,
    claim: Callable[[float], bool] | None = None,
) -> None:
    """Retry ``task`` after the delay the retry decision gives (raises Celery's Retry), or,
    on the ``max_attempts``-th attempt or an error not worth retrying, log ``message`` and
    record that the task gave up (its work stays pending for the next sweep or beat).

    ``claim``: asked (with the retry's countdown) before a retry is queued; False when another
    task will do the work (``_claim_retry``), and this one ends, recorded as given up with
    ``exc``."""
    from memhoncho.honcho import adapter

    decision = adapter.classify(exc, attempt)
    if decision.retry and attempt < max_attempts:
        delay = decision.delay_s if decision.delay_s is not None else default_delay_s
        if claim is not None and not claim(delay):
            results.gave_up(task, exc)
            return
        raise task.retry(countdown=delay) from None
    log.warning(message, extra={"action": action, "code": exc.code, "failures": attempt})
    results.gave_up(task, exc)


# ---- delivery ----------------------------------------------------------------------------

LOCK_RETRY_S = 0.5  # seconds (jittered 0.5x..1.5x): another worker holds the conversation
FORK_RETRY_S = 5.0  # seconds (jittered): a fork waits for its parent's delivery
STORE_RETRY_S = 5.0  # seconds (jittered): the store's database is out of reach
STORE_MAX_RETRIES = 24  # retries of one hint (about two minutes) before the sweep takes over
#: seconds at most added to a fence's wait, so retries of many fenced marks spread out
FENCE_SLACK_S = 0.25
#: Honcho failures in a row with no message delivered between them before the hint is
#: dropped (the records stay pending; the sweep re-drives them)
DELIVER_MAX_FAILURES = 20


def _jittered(seconds: float) -> float:
    return seconds * random.uniform(0.5, 1.5)


def _claim_retry(deployment: Deployment, conversation_id: str) -> Callable[[float], bool]:
    """The claim of a delivery's retry: one retrying hint a conversation. The retry claims the
    conversation's hint mark as a capture does; where a hint already waits (a capture's, or
    another task's retry) that one carries on and this task ends. Without it each capture
    made while Honcho fails started a retry chain of its own (the delivery had taken the mark),
    every chain backing off on the conversation's one failure count: N chains called a failing
    Honcho N times as often and raised the count N times as fast (a retry 233 s away after
    4 s of failures, seen in ``tests/delivery/test_delivery_faults_workers.py``). The mark is
    dated when the retry is due, so a countdown past ``stranded.FAILED_GRACE_S`` (a long
    Retry-After) is not taken for a lost hint and overtaken by the watchdog's."""
    from memhoncho import ids

    key = ids.conversation_key(conversation_id)

    def claim(countdown_s: float) -> bool:
        try:
            return deployment.store().claim_hint(key, due_in_s=countdown_s)
        except MemhonchoError:  # the mark cannot be read (a database away): retry anyway
            return True

    return claim


def _retry_unreachable(
    task: Any, deployment: Deployment, conversation_id: str, exc: MemhonchoError
) -> None:
    """Honcho was never reached: nothing can land, so no fence and no giving up; try again
    soon (``retry.UNREACHABLE_RETRY_CAP_S``), as long as it takes, which is what notices it
    back; one retrying hint a conversation (``_claim_retry``)."""
    from memhoncho.delivery import engine as delivery
    from memhoncho.honcho import adapter

    attempt = max(1, delivery.failures_in_a_row(deployment, conversation_id))
    decision = adapter.classify(exc, attempt)
    if not _claim_retry(deployment, conversation_id)(decision.delay_s or 0.0):
        results.gave_up(task, exc)  # a failure for the results; the waiting hint retries
        return
    raise task.retry(countdown=decision.delay_s) from None


def _send_more(app: Any, deployment: Deployment, conversation_id: str) -> None:
    """The follow-up hint of a delivery that stopped at its call budget, published as a
    capture's is: under the conversation's hint mark, so the watchdog and the status view see
    it queued (``store/stranded.py``), and not at all when a capture's hint already waits."""
    from memhoncho import ids

    key = ids.conversation_key(conversation_id)
    store = deployment.store()
    if not store.claim_hint(key):
        return
    try:
        app.send_task(routing.DELIVER_TASK, args=[conversation_id], ignore_result=True)
    except Exception:
        store.release_hint(key)  # the next capture publishes
        raise


# At least once (acks_late, requeued when a worker dies): delivery is idempotent by design.
@shared_task(
    name=routing.DELIVER_TASK, bind=True, ignore_result=True, acks_late=True, max_retries=None
)
def deliver(
    self: Any, conversation_id: str, deployment_id: str | None = None, **_retired: Any
) -> dict[str, Any] | None:
    """Deliver the conversation's pending records (``delivery.deliver_conversation``).

    ``deployment_id``: the identity of the host's deployment; another one is logged and
    counted (``worker/foreign.py``), and the hint still taken as this deployment's.

    How many Honcho failures in a row it has met is the ledger's ``failures`` (a retry queued
    by an earlier version may still carry them as ``failures``/``held``: ignored).
    """
    from memhoncho.delivery import engine as delivery
    from memhoncho.errors import (
        ForkWaiting,
        HonchoFailure,
        HonchoUnreachable,
        InFlightSettling,
        LockBusy,
        MemhonchoError,
        StoreUnavailable,
    )
    from memhoncho.worker import foreign

    deployment = task_context(self.app)
    try:
        if not self.request.retries:  # a retry carries the same identity: counted once
            foreign.check(deployment, conversation_id, deployment_id)
        report = delivery.deliver_conversation(deployment, conversation_id)
    except InFlightSettling as exc:  # back when the fence opens; the failure count carries on
        countdown = exc.wait_s + random.uniform(0.0, FENCE_SLACK_S)
        raise self.retry(countdown=countdown) from None
    except ForkWaiting:
        raise self.retry(countdown=_jittered(FORK_RETRY_S)) from None
    except LockBusy:
        raise self.retry(countdown=_jittered(LOCK_RETRY_S)) from None
    except StoreUnavailable as exc:
        # The database is restarting or out of reach: try again shortly, for a while; past
        # that the records are safe in it and the sweep re-drives them.
        if self.request.retries < STORE_MAX_RETRIES:
            raise self.retry(countdown=_jittered(STORE_RETRY_S)) from None
        log.warning(
            "delivery stopped: the store is unavailable; the sweep re-drives the records",
            extra={"action": "delivery_skipped", "code": exc.code},
        )
        results.gave_up(self, exc)
        return None
    except HonchoUnreachable as exc:
        _retry_unreachable(self, deployment, conversation_id, exc)
        return None
    except HonchoFailure as exc:
        _retry_or_give_up(
            self,
            exc,
            # counted by the engine as it failed; at least this one if the ledger missed it
            attempt=max(1, delivery.failures_in_a_row(deployment, conversation_id)),
            max_attempts=DELIVER_MAX_FAILURES,
            default_delay_s=LOCK_RETRY_S,
            action="delivery_gave_up",
            message="delivery stopped; the records stay pending for the sweep",
            claim=_claim_retry(deployment, conversation_id),
        )
        return None
    except MemhonchoError as exc:  # no key, a bad id, a store error: nothing to retry now
        log.warning(
            "delivery not possible now; the records stay pending for the sweep",
            extra={"action": "delivery_skipped", "code": exc.code},
        )
        results.gave_up(self, exc)
        return None
    if report.state == delivery.DeliveryState.MORE:
        _send_more(self.app, deployment, conversation_id)
    if report.first_delivery:
        self.app.send_task(routing.REFRESH_TASK, args=[conversation_id], ignore_result=True)
    return {
        "state": str(report.state),
        "messages": report.delivered_messages + report.recovered_messages,
        "calls": report.calls,
    }


# At most once (acks_late off): a recall nobody waits for any more must not run twice, and a
# remember must not store its conclusion twice. The host's wait and the task's expiry agree.
@shared_task(name=routing.RECALL_TASK, bind=True, ignore_result=False, acks_late=False)
def recall(
    self: Any, name: str, arguments: dict[str, Any], owner: str | None, proof: object = None
) -> dict[str, Any]:
    """Run one recall tool for a waiting host, when ``proof`` shows the call is the
    deployment's (``worker/task_proof.py``); answers ``{"ok", "result" | "error"}``."""
    from memhoncho.worker import remote_recall

    context = task_context(self.app)
    return remote_recall.worker_outcome(
        self.backend, self.request.id, context, name, arguments, owner, proof
    )


# ---- beat: the outbox sweep and the representation refresh ------------------------------

REFRESH_MAX_RETRIES = 5  # a refresh that keeps failing waits for the next beat instead
REFRESH_RETRY_S = 1.0  # when the retry decision names no delay


@shared_task(name=routing.SWEEP_TASK, bind=True, ignore_result=True)
def outbox_sweep(self: Any) -> dict[str, Any]:
    """Resolve forks, re-drive pending deliveries, compact the outboxes (``sweep.sweep``)."""
    from memhoncho.upkeep import sweep

    def send_delivery(conversation_id: str) -> bool:
        self.app.send_task(routing.DELIVER_TASK, args=[conversation_id], ignore_result=True)
        return True

    report = sweep.sweep(task_context(self.app), send_delivery)
    return report.model_dump(mode="json", exclude={"conversations"})


@shared_task(name=routing.REFRESH_ALL_TASK, bind=True, ignore_result=True)
def refresh_representations(self: Any) -> int:
    """Enqueue a refresh of every recently delivered conversation whose snapshot is old."""
    from memhoncho.recall import memory

    due = memory.refresh_due(task_context(self.app))
    for conversation_id in due:
        self.app.send_task(routing.REFRESH_TASK, args=[conversation_id], ignore_result=True)
    return len(due)


@shared_task(
    name=routing.REFRESH_TASK,
    bind=True,
    ignore_result=True,
    max_retries=REFRESH_MAX_RETRIES,
)
def refresh_representation(self: Any, conversation_id: str) -> None:
    """Fetch one conversation's representation and session context into its cache file."""
    from memhoncho.recall import memory

    try:
        memory.refresh_representation(task_context(self.app), conversation_id)
    except MemhonchoError as exc:
        _retry_or_give_up(
            self,
            exc,
            attempt=self.request.retries + 1,
            max_attempts=REFRESH_MAX_RETRIES + 1,
            default_delay_s=REFRESH_RETRY_S,
            action="refresh_gave_up",
            message="representation refresh gave up; the next beat tries again",
        )
