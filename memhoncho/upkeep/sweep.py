"""The outbox sweep: re-drive delivery of whatever is pending, then compact the outboxes.

Beat runs it (``memhoncho.outbox_sweep``) and so does ``memhoncho sweep``. In order: resolve
pending forks (``forks.resolve_pending_forks``); enqueue delivery of
every conversation with pending records (through the caller's ``enqueue``, the same routing as
capture); compact: delivered records leave the outbox, records pending longer than
``outbox_retention_days`` move to the dead-letter file with a warning each (written durably
before the outbox is replaced), torn and corrupt lines met on the way go to quarantine.
Retention is checked on the oldest pending record (records are appended in capture order); a
rewrite, once one happens, checks every record, and ``replayed_at`` restarts a record's clock.

Past fork resolution (``forks.resolve_fork_now`` tries each child's lock once and may clone
under it), the sweep never calls Honcho and holds no lock while anything does: the outbox lock
only for one rewrite, the conversation lock only (tried, never waited for) around a rewrite
that dead-letters, so no delivery is reading the records it moves. A failure is recorded for
its conversation and the sweep goes on. A sweep with nothing pending reads no outbox: the sweep
index remembers which conversations were clean, by the stat stamp of their outbox file.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Literal

from pydantic import BaseModel, Field

from memhoncho import ids
from memhoncho.delivery import forks
from memhoncho.deployment import Deployment
from memhoncho.errors import CorruptFile, LockBusy, MemhonchoError
from memhoncho.models import Ledger
from memhoncho.store.base import Record, Seen, Store

log = logging.getLogger(__name__)

DAY_S = 86_400.0  # seconds in a day
PROGRESS_EVERY = 64  # conversations between progress calls: a bar costs nothing per unchanged one
NOT_ENQUEUED = "ERR_NOT_ENQUEUED"  # the delivery hint could not be published
UNEXPECTED = "ERR_UNEXPECTED"  # an exception outside memhoncho's error tree
RETENTION_REASON = "retention"

Stage = Literal["forks", "ledger", "enqueue", "compact", "conversation", "index"]
Enqueue = Callable[[str], bool]


class SweepFailure(BaseModel):
    """One thing the sweep could not do; the rest of the sweep went on."""

    stage: Stage
    code: str
    message: str
    conversation_key: str | None = None
    conversation_id: str | None = None


class ConversationSwept(BaseModel):
    """What the sweep did to one conversation that was not clean."""

    conversation_key: str
    conversation_id: str | None = None
    pending: bool = False  #: it had records past the ledger's delivered seq
    enqueued: bool = False
    dropped_delivered: int = 0  #: delivered records that left the outbox
    dead_lettered: int = 0  #: records moved to ``data/dead/<key>.jsonl``
    kept: int | None = None  #: records left in the outbox after a rewrite
    quarantined: int = 0  #: torn or corrupt lines moved to quarantine
    retention_skipped: bool = False  #: a delivery held the lock, retention waits a sweep


class SweepReport(BaseModel):
    """What one sweep did. ``conversations`` only lists those that were not clean."""

    started_at: float
    duration_s: float = 0.0
    listed: int = 0  #: conversations with an outbox file
    unchanged: int = 0  #: clean at the last sweep and not touched since (no read)
    clean: int = 0  #: looked at: nothing pending, nothing to compact
    pending: int = 0
    enqueued: int = 0
    dropped_delivered: int = 0
    dead_lettered: int = 0
    quarantined: int = 0
    forks: Any = None  #: what fork resolution reported, when it ran
    conversations: list[ConversationSwept] = Field(default_factory=list)
    failures: list[SweepFailure] = Field(default_factory=list)

    def fail(self, stage: Stage, exc: BaseException | str, **where: str | None) -> None:
        if isinstance(exc, MemhonchoError):
            code, message = exc.code, exc.message
        elif isinstance(exc, str):
            code, message = NOT_ENQUEUED, exc
        else:
            code, message = UNEXPECTED, type(exc).__name__
        self.failures.append(SweepFailure(stage=stage, code=code, message=message, **where))
        log.warning(
            "sweep step failed",
            extra={"action": "sweep_failed", "stage": stage, "code": code, **where},
        )


def sweep(
    deployment: Deployment,
    enqueue: Enqueue,
    *,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepReport:
    """Resolve forks, re-drive pending deliveries, compact; never raises for one conversation.

    ``progress(done, total)`` is called as conversations are looked at (``memhoncho sweep``).
    """
    started = time.monotonic()
    now = time.time() if now is None else now
    report = SweepReport(started_at=now)
    _resolve_forks(deployment, report)
    settings = deployment.settings()
    retention_s = settings.outbox_retention_days * DAY_S
    store = deployment.store()
    try:  # a store that drops delivered records in bulk does it first (the database)
        bulk = store.compact_delivered()
    except MemhonchoError as exc:
        report.fail("compact", exc)
        bulk = {}
    listing = store.sweep_listing()  # taken before any look, so a change since is seen next time
    report.listed = listing.listed
    clean: set[str] = set()
    looked_clean = 0  # counted here: a pydantic field assignment costs more
    for done, key in enumerate(listing.keys):
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress(listing.unchanged + done, report.listed)
        try:
            swept = _sweep_one(
                deployment, store, key, enqueue, report, now, retention_s, listing.seen.get(key)
            )
        except Exception as exc:  # one conversation never stops the sweep
            report.fail("conversation", exc, conversation_key=key)
            continue
        if key in bulk:
            if swept is None:
                swept = ConversationSwept(conversation_key=key)
            swept.dropped_delivered += bulk.pop(key)
        if swept is None:
            looked_clean += 1
            clean.add(key)
        else:
            report.conversations.append(swept)
            _add_up(report, swept)
    for key, dropped in sorted(bulk.items()):  # compacted to nothing: no look was needed
        swept = ConversationSwept(conversation_key=key, dropped_delivered=dropped, kept=0)
        report.conversations.append(swept)
        _add_up(report, swept)
    report.unchanged, report.clean = listing.unchanged, looked_clean
    if progress is not None:
        progress(report.listed, report.listed)
    try:
        listing.remember_clean(clean)
    except (OSError, MemhonchoError) as exc:
        report.fail("index", exc)
    report.duration_s = time.monotonic() - started
    log.info(
        "outbox sweep done",
        extra={
            "action": "sweep_done",
            "listed": report.listed,
            "pending": report.pending,
            "dropped_delivered": report.dropped_delivered,
            "dead_lettered": report.dead_lettered,
            "failures": len(report.failures),
        },
    )
    return report


def _add_up(report: SweepReport, swept: ConversationSwept) -> None:
    report.pending += swept.pending
    report.enqueued += swept.enqueued
    report.dropped_delivered += swept.dropped_delivered
    report.dead_lettered += swept.dead_lettered
    report.quarantined += swept.quarantined


def _resolve_forks(deployment: Deployment, report: SweepReport) -> None:
    """Pending forks first, so their children's deliveries find a session to go to."""
    try:
        result = forks.resolve_pending_forks(deployment)
    except Exception as exc:  # Honcho down: the forks wait for the next sweep
        report.fail("forks", exc)
        return
    report.forks = _plain(result)
    for item in result if isinstance(result, list) else []:
        if isinstance(item, dict) and item.get("status") == "failed":
            report.failures.append(
                SweepFailure(
                    stage="forks",
                    code=str(item.get("code") or UNEXPECTED),
                    message="the pending fork could not be resolved; the next sweep tries again",
                    conversation_key=item.get("conversation_key"),
                )
            )


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict | list | str | int | float | bool) or value is None:
        return value
    return repr(value)


def _sweep_one(
    deployment: Deployment,
    store: Store,
    key: str,
    enqueue: Enqueue,
    report: SweepReport,
    now: float,
    retention_s: float,
    seen: Seen | None = None,
) -> ConversationSwept | None:
    """Look at one conversation; None when it is clean (nothing pending, nothing to compact).

    ``seen``: the ledger and edges the store's listing read already (the database reads them
    for every conversation in one query), else they are read here.
    """
    ledger_ok = True
    if seen is not None:
        ledger, first, last = seen
    else:
        try:
            ledger = store.read_ledger(key)
        except CorruptFile as exc:
            report.fail("ledger", exc, conversation_key=key)
            ledger, ledger_ok = None, False
    delivered = ledger.delivered_seq if ledger else 0
    quarantine_before = store.quarantine_mark(key)
    if seen is None:
        with _collector_paused():  # a torn edge makes the file store read (and repair) it all
            first, last = store.edges(key)
    pending = last is not None and last["seq"] > delivered
    has_delivered = first is not None and first["seq"] <= delivered
    head_expired = (
        pending
        and first is not None
        and first["seq"] > delivered
        and _expired(first, now, retention_s)
    )
    swept = ConversationSwept(conversation_key=key, pending=pending)
    swept.conversation_id = _conversation_id(key, ledger, first or last)
    if pending:
        swept.enqueued = _enqueue(enqueue, swept, report)
    if ledger_ok and (has_delivered or head_expired):
        _compact(store, key, swept, delivered, now, retention_s)
    swept.quarantined = store.quarantined_since(key, quarantine_before)
    if not (pending or has_delivered or swept.quarantined):
        return None
    return swept


def _conversation_id(key: str, ledger: Ledger | None, record: Record | None) -> str | None:
    if ledger is not None:
        return ledger.conversation_id
    if record is not None and isinstance(record.get("conversation_id"), str):
        return str(record["conversation_id"])
    return ids.decode(key)


def _enqueue(enqueue: Enqueue, swept: ConversationSwept, report: SweepReport) -> bool:
    where = {"conversation_key": swept.conversation_key, "conversation_id": swept.conversation_id}
    if swept.conversation_id is None:
        report.fail("enqueue", "the conversation id of this outbox is unknown", **where)
        return False
    try:
        ok = bool(enqueue(swept.conversation_id))
    except Exception as exc:  # the broker is down: the next sweep tries again
        report.fail("enqueue", exc, **where)
        return False
    if not ok:
        report.fail("enqueue", "the delivery hint was not published", **where)
    return ok


def _expired(record: Record, now: float, retention_s: float) -> bool:
    """Pending longer than retention, counted from capture or from the last replay."""
    since = max(float(record.get("captured_at") or now), float(record.get("replayed_at") or 0))
    return now - since > retention_s


def _compact(
    store: Store,
    key: str,
    swept: ConversationSwept,
    delivered: int,
    now: float,
    retention_s: float,
) -> None:
    """One rewrite: drop delivered records and, when no delivery is running, the expired ones."""
    with ExitStack() as stack:
        in_flight: set[str] = set()
        try:
            stack.enter_context(store.conversation_lock(key, timeout_s=0))
            may_expire = True
            fresh = store.read_ledger(key)  # under the lock: the newest delivered window
            if fresh is not None:
                delivered = max(delivered, fresh.delivered_seq)
                # a send may have reached Honcho: delivery resolves these, retention never does
                in_flight = {*fresh.in_flight, *fresh.delivered_partial}
        except LockBusy:
            may_expire = False  # a delivery is reading these records; retention waits
            swept.retention_skipped = True

        def keep(record: Record) -> bool:
            if record["seq"] <= delivered:
                return False
            if not may_expire or not _expired(record, now, retention_s):
                return True
            return any(m.get("id") in in_flight for m in record.get("messages", []))

        def to_dead_letters(dropped: list[Record]) -> None:
            dead = [r for r in dropped if r["seq"] > delivered]
            if not dead:
                return
            with store.dead_lock(key):
                store.append_dead(key, dead, RETENTION_REASON)
            for record in dead:
                log.warning(
                    "an undelivered record passed retention; moved to the dead-letter file",
                    extra={
                        "action": "dead_lettered",
                        "conversation_key": key,
                        "batch_id": record.get("batch_id"),
                        "seq": record["seq"],
                        "age_days": round(
                            (now - float(record.get("captured_at") or now)) / DAY_S, 2
                        ),
                        "messages": len(record.get("messages", [])),
                    },
                )

        with _collector_paused():
            kept, dropped = store.rewrite(key, keep, before_replace=to_dead_letters)
    swept.kept = len(kept)
    swept.dead_lettered = sum(1 for r in dropped if r["seq"] > delivered)
    swept.dropped_delivered = len(dropped) - swept.dead_lettered


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic GC while a whole outbox is parsed.

    A parse makes a dict per record; the collector would rescan all of them again and again as
    they pile up, which makes a large rewrite superlinear (``memhoncho bench sweep``). Records
    hold no reference cycles, so reference counting frees them all the same.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
