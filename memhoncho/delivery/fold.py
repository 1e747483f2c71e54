"""How a delivery's outcome folds into the conversation's ledger: pure, no I/O.

The engine (``engine``) knows which outbox message ids Honcho now holds (sent and
answered, or found after an unclear send); ``fold`` turns that into the ledger's
``delivered_seq``, the partial record, the delivered-batch window, the anchors and counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memhoncho.models import Ledger, OutboxMessage, Record


@dataclass(frozen=True)
class Pending:
    """One message still to send, with the record it belongs to."""

    record: Record
    message: OutboxMessage

    @property
    def outbox_id(self) -> str:
        return str(self.message["id"])


def created_at(record: Record) -> datetime | None:
    """Honcho's ``created_at`` for the record's messages: when the run happened, when the
    host said (an import's original time), else when it was captured."""
    happened = record.get("happened_at")
    if isinstance(happened, str):
        try:
            return datetime.fromisoformat(happened)
        except ValueError:
            pass  # a hand-edited line: the capture time is still the run's best time
    captured = record.get("captured_at")
    if isinstance(captured, int | float):
        return datetime.fromtimestamp(float(captured), tz=UTC)
    return None


def pending_messages(ledger: Ledger, records: Iterable[Record]) -> list[Pending]:
    """The messages of ``records`` Honcho does not hold yet, in capture order."""
    done = set(ledger.delivered_partial)
    return [
        Pending(record, message)
        for record in records
        if record["seq"] > ledger.delivered_seq
        for message in record.get("messages") or []
        if message["id"] not in done
    ]


def fold(
    ledger: Ledger,
    records: list[Record],
    delivered: Mapping[str, str | None],
    *,
    batch_window: int,
    anchor_window: int,
    now: float,
) -> Ledger:
    """The ledger once Honcho holds ``delivered`` (outbox id -> Honcho message id or None).

    ``records`` are the conversation's pending records in capture order. ``delivered_seq``
    advances over the prefix of records whose every message is held; the messages held of the
    next record become ``delivered_partial``. Every delivered entry (user input or agent
    answer) folds an anchor ``(entry id, Honcho id of its last message)``, so a fork can clone
    at exactly its fork point. ``in_flight`` is left as it was: the caller decides it.
    """
    held = set(ledger.delivered_partial) | set(delivered)
    seq = ledger.delivered_seq
    batches = list(ledger.delivered_batches)
    digests = dict(ledger.delivered_digests)
    partial: list[str] = []
    anchors = list(ledger.anchors)
    newly = 0
    blocked = False
    for record in records:
        if record["seq"] <= ledger.delivered_seq:
            continue
        message_ids = [str(m["id"]) for m in record.get("messages") or []]
        for message in record.get("messages") or []:
            mid = str(message["id"])
            if mid not in delivered or mid in ledger.delivered_partial:
                continue
            newly += 1
            honcho_id = delivered[mid]
            if honcho_id is not None:
                _fold_anchor(anchors, int(message["entry_id"]), honcho_id)
        if blocked:
            continue
        if all(mid in held for mid in message_ids):
            seq = record["seq"]
            batches.append(str(record["batch_id"]))
            if isinstance(record.get("digest"), str):
                digests[str(record["batch_id"])] = record["digest"]
        else:
            partial = [mid for mid in message_ids if mid in held]
            blocked = True
    update: dict[str, Any] = {
        "delivered_seq": seq,
        "delivered_partial": partial,
        "delivered_batches": batches[-batch_window:],
        "delivered_digests": {b: digests[b] for b in batches[-batch_window:] if b in digests},
        "anchors": anchors[-anchor_window:],
        "messages_delivered": ledger.messages_delivered + newly,
    }
    if newly:
        update["last_delivered_at"] = now
        if ledger.first_delivered_at is None:
            update["first_delivered_at"] = now
    return ledger.model_copy(update=update)


def _fold_anchor(anchors: list[tuple[int, str]], entry_id: int, honcho_id: str) -> None:
    """The entry's newest message stands for it: a later part replaces an earlier one."""
    if anchors and anchors[-1][0] == entry_id:
        anchors[-1] = (entry_id, honcho_id)
    else:
        anchors.append((entry_id, honcho_id))
