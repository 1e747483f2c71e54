"""Stranded conversations: pending records, and nothing queued or running to deliver them.

A delivery hint can vanish with the worker that held it: a SIGKILLed worker's unacked hint
comes back on Redis only after the visibility timeout (an hour), captures made while its mark
stood published nothing, and beat's sweep may run every 15 minutes or not at all. This module
says which conversations are in that state, from what the store already keeps, so the worker
watchdog (``worker/watchdog.py``) can enqueue them again and the status view can name them.

A conversation is stranded when, past its *bound*, it still has pending records and
- no hint waits for it: no hint mark, or one older than ``hint_marks.STALE_S`` (presumed lost)
  while its delivery queue is empty. A hint behind a backlog waits longer than ``STALE_S``
  without being lost: while the conversation's queue holds messages (``in_busy_queue``, asked
  of the broker once a look and only when a mark is old), its mark is presumed lost only after
  ``QUEUED_MAX_S``. Without that, a backlog of N conversations had each one enqueued again
  every look and counted stranded while its first hint still waited. The price: a hint lost
  while other hints keep its queue busy is found once the queue empties or after
  ``QUEUED_MAX_S``, not ``STALE_S``: one a worker had received but not started when it was
  SIGKILLed (held unacked on Redis until the visibility timeout, gone on the embedded broker;
  RabbitMQ requeues it at once; a worker holds no more hints than pool processes, so such a
  hint lives only between its arrival and its start), or one flushed from the broker while
  new captures fill the queue again. A hint leaves its queue a moment before its worker's
  receipt renews its mark (``worker/tasks.py``, on a thread of its own): a look that finds the
  queue empty and the mark old in that moment looks once more, ``RECEIPT_GRACE_S`` later and
  once for all such conversations, before it calls any stranded;
- no delivery runs for it: its conversation lock is free. The lock is the kernel's ``flock``
  (or PostgreSQL's session advisory lock), released when its holder dies, so a killed worker's
  delivery never looks alive and a live one always does; no heartbeat needs to be written.

Its bound is the moment a new delivery could start and be useful: the oldest pending capture;
a stale mark's age limit; for a send that may have reached Honcho (an open in-flight mark), its
fence (start + ``honcho_timeout_s`` + ``send_settle_s``), before which a new delivery would
only wait; after a Honcho failure, ``FAILED_GRACE_S`` (the task's own retry is queued then;
a retry that claimed the hint mark dated it when due, so a long Retry-After keeps it fresh).
Enqueueing one extra hint is always safe (a delivery is idempotent under the lock, the ledger
and the fence); what this protects is promptness, never exactly-once.

The cost of a look is what the store reads anyway to count its pending conversations, and
no ledger: ``Store.pending_conversations`` hands over each pending conversation without a
fresh hint together with its ledger's facts (open send, newest failure, last delivery). On
the files those facts are columns of the census's rows (``store/census.py``), read again only
when the ledger's stat stamp changed, so a look is a listing with a stat per outbox (an append
changes nothing a listing shows), a stat per pending conversation's ledger, and one listing of
the hint marks (``hint_marks.MarkTimes``); on PostgreSQL it is one query over the pending
conversations' partial index. Only a conversation past its bound costs more: a lock try, and
its id (decoded from its key, else read). Nothing is paid per capture. ``memhoncho bench
watchdog`` measures a look at 100,000 conversations on both stores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from memhoncho import ids
from memhoncho.errors import LockBusy, MemhonchoError
from memhoncho.settings import Settings
from memhoncho.store import hint_marks
from memhoncho.store.base import Store

#: seconds after a Honcho failure during which the failed task's own retry is presumed queued
FAILED_GRACE_S = 60.0
#: seconds a conversation may sit past its bound before it is counted: room for a hint in
#: flight between two tasks (a delivery's follow-up, a lock retry) that holds no mark
SETTLE_S = 2.0
#: seconds a hint mark is presumed to wait in a queue that holds messages before it is
#: presumed lost: a backlog drains well within it, and a hint lost behind one is found then
QUEUED_MAX_S = 300.0
#: seconds a hint may take from leaving its queue to its worker's receipt renewing its mark:
#: tens of milliseconds on a loaded 2-core machine (CI, 2026-12-07), where a look between the
#: two counted a draining backlog's conversation stranded
RECEIPT_GRACE_S = 0.3


@dataclass(frozen=True)
class Stranded:
    """A conversation with pending records and nothing queued or running for it."""

    key: str
    conversation_id: str
    bound_at: float  #: when it could have been delivered again (epoch seconds)
    oldest_pending_at: float

    def past_bound_s(self, now: float) -> float:
        return max(0.0, now - self.bound_at)


def find(
    store: Store,
    settings: Settings,
    *,
    now: float | None = None,
    in_busy_queue: Callable[[str], bool] | None = None,
) -> list[Stranded]:
    """The stranded conversations, longest stranded first.

    ``in_busy_queue(conversation_id)``: whether the conversation's delivery queue holds
    messages (``worker.queue_depths.BusyQueues``; the store does not import the broker's
    stage). Without it every queue is taken as idle."""
    now = time.time() if now is None else now
    fence_s = _fence_s(settings)
    found = []
    idle_queued: list[tuple[Stranded, float]] = []  # an idle queue, an old mark: look again
    for p in store.pending_conversations(hinted_after=now - hint_marks.STALE_S):
        bound = p.oldest_pending_at
        if p.in_flight_since is not None:  # a send that may land: wait for its fence
            bound = max(bound, p.in_flight_since + fence_s)
        if p.failed_at is not None:  # the failed task's own retry is presumed queued
            bound = max(bound, p.failed_at + FAILED_GRACE_S)
        if p.last_delivered_at is not None:
            bound = max(bound, p.last_delivered_at)
        if p.hint_at is not None:  # a mark older than STALE_S: its hint is presumed lost
            bound = max(bound, p.hint_at + hint_marks.STALE_S)
        if bound + SETTLE_S > now or _running(store, p.key):
            continue
        conversation_id = p.conversation_id or _conversation_id(store, p.key)
        if conversation_id is None:
            continue
        busy = None
        if p.hint_at is not None and in_busy_queue is not None:
            busy = in_busy_queue(conversation_id)
            if busy:  # a hint behind others in its queue is lost only after QUEUED_MAX_S
                bound = max(bound, p.hint_at + QUEUED_MAX_S)
                if bound + SETTLE_S > now:
                    continue
        candidate = Stranded(p.key, conversation_id, bound, p.oldest_pending_at)
        if busy is False and p.hint_at is not None:
            idle_queued.append((candidate, p.hint_at))
        else:
            found.append(candidate)
    found.extend(_not_received(store, idle_queued))
    return sorted(found, key=lambda s: s.bound_at)


def _not_received(store: Store, candidates: list[tuple[Stranded, float]]) -> list[Stranded]:
    """The candidates (an old mark, an idle queue) whose mark is still there and still not
    renewed ``RECEIPT_GRACE_S`` later. The broker was asked after the marks were read, and a
    hint leaves its queue a moment before its worker's receipt renews its mark
    (``worker/tasks.py``): a renewed mark is a hint received, not lost; a mark taken meanwhile
    is a delivery that started. One wait a look, only when there is a candidate."""
    if not candidates:
        return []
    time.sleep(RECEIPT_GRACE_S)
    still = []
    for candidate, hint_at in candidates:
        try:
            mark_at = store.hint_mark_at(candidate.key)
        except MemhonchoError:
            mark_at = hint_at  # cannot tell: as it was
        if mark_at is not None and mark_at <= hint_at:
            still.append(candidate)
    return still


def _fence_s(settings: Settings) -> float:
    """``delivery.fence.window_s``, restated: the store does not import the delivery stage."""
    return settings.honcho_timeout_s + settings.send_settle_s if settings.send_fence else 0.0


def _conversation_id(store: Store, key: str) -> str | None:
    """The id behind ``key``: decoded from a plain key (no read), else its ledger's, else its
    first pending record's. None when none reads (the census reports it)."""
    decoded = ids.decode(key)  # canonical keys only: conversation_key(decoded) is key
    if decoded is not None and key != ids.NAMED_DEFAULT_USER:  # a peer's form, not a key's
        return decoded
    try:
        ledger = store.read_ledger(key)
        if ledger is not None:
            return ledger.conversation_id
        first, _ = store.edges(key)
    except MemhonchoError:
        return None
    value = first.get("conversation_id") if first else None
    return value if isinstance(value, str) else None


def _running(store: Store, key: str) -> bool:
    """A delivery holds the conversation's lock (a dead holder's lock is already released)."""
    try:
        with store.conversation_lock(key, timeout_s=0):
            return False
    except LockBusy:
        return True
    except MemhonchoError:
        return True  # cannot tell: leave it to the next look
