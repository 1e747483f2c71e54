"""The audit: does Honcho hold each conversation's messages exactly once, in capture order?

Read-only. For every conversation with a ledger (or one), it lists what the conversation's Honcho
session holds (every page; each message carries its outbox id in metadata) and compares it with
the ledger and the outbox: **missing** (the ledger says delivered, Honcho lacks it),
**duplicated** (one outbox id stored more than once, with the Honcho message ids),
**out of order** (stored before a message captured earlier) and **unknown** (a message no
outbox record accounts for). Messages in flight or still pending are neither missing nor
wrong. Nothing is written anywhere: not the outbox (a torn line is skipped, not quarantined),
not the ledger, not Honcho.

Capture order is known from the ledger's delivered-batch window followed by the outbox's
records. A conversation older than that window, or a fork's clone, starts with messages of
batches the ledger no longer names; a leading run of them is counted (``before_window``,
``inherited``), not blamed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from memhoncho import ids
from memhoncho.capture.record import OUTBOX_ID_KEY
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError, StoreError
from memhoncho.models import Ledger, Record
from memhoncho.store.lines import parse

if TYPE_CHECKING:
    from honcho import Honcho

#: Names of the problems an audit reports, in the order a table shows them.
PROBLEMS = ("missing", "duplicated", "out_of_order", "unknown", "unrecorded")
#: listings of one conversation at most, while deliveries keep changing its ledger
STABLE_TRIES = 3


class OutOfOrder(BaseModel):
    """A message out of capture order: one of the fewest whose removal leaves the session in
    capture order (a swap of two messages apart names both; of neighbours, one)."""

    outbox_id: str
    honcho_id: str
    stored_at: int  #: its index among the session's messages
    stored_after: str | None  #: the outbox id of the message stored just before it


class ConversationAudit(BaseModel):
    """What the audit found for one conversation."""

    conversation_id: str
    conversation_key: str
    session_id: str | None = None
    held: int = 0  #: messages in the Honcho session
    delivered: int = 0  #: messages the ledger says Honcho holds
    in_flight: int = 0  #: ids of the open send (held or not: neither is wrong)
    pending: int = 0  #: outbox messages not delivered yet
    inherited: int = 0  #: leading messages a fork's clone copied from its parent
    before_window: int = 0  #: leading messages of batches older than the ledger's window
    #: outbox ids the ledger says delivered that Honcho lacks
    missing: list[str] = Field(default_factory=list)
    #: delivered messages missing that no outbox record names any more (counted only)
    missing_unnamed: int = 0
    #: outbox id -> the Honcho message ids holding it, in insertion order
    duplicated: dict[str, list[str]] = Field(default_factory=dict)
    out_of_order: list[OutOfOrder] = Field(default_factory=list)
    #: Honcho ids of messages no outbox id of this conversation accounts for
    unknown: list[str] = Field(default_factory=list)
    #: outbox ids Honcho holds that the ledger records as neither delivered nor in flight
    unrecorded: list[str] = Field(default_factory=list)
    error: dict[str, Any] | None = None  #: the audit could not read this conversation

    @property
    def ok(self) -> bool:
        return self.error is None and not any(
            (
                self.missing,
                self.missing_unnamed,
                self.duplicated,
                self.out_of_order,
                self.unknown,
                self.unrecorded,
            )
        )


class AuditReport(BaseModel):
    conversations: list[ConversationAudit] = Field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.conversations)

    def totals(self) -> dict[str, int]:
        c = self.conversations
        return {
            "conversations": len(c),
            "wrong": sum(1 for a in c if not a.ok),
            "held": sum(a.held for a in c),
            "delivered": sum(a.delivered for a in c),
            "missing": sum(len(a.missing) + a.missing_unnamed for a in c),
            "duplicated": sum(len(v) - 1 for a in c for v in a.duplicated.values()),
            "out_of_order": sum(len(a.out_of_order) for a in c),
            "unknown": sum(len(a.unknown) for a in c),
            "unrecorded": sum(len(a.unrecorded) for a in c),
            "errors": sum(1 for a in c if a.error is not None),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "totals": self.totals(),
            "duration_s": round(self.duration_s, 3),
            "conversations": [
                {**a.model_dump(mode="json"), "ok": a.ok} for a in self.conversations
            ],
        }


Progress = Callable[[int, int], None]


def audit(
    deployment: Deployment,
    conversation_id: str | None = None,
    *,
    progress: Progress | None = None,
) -> AuditReport:
    """Audit one conversation, or every one with a ledger or an outbox; reads only."""
    from memhoncho.honcho import adapter

    started = time.monotonic()
    store = deployment.store()
    if conversation_id is not None:
        keys = [ids.conversation_key(conversation_id)]
    else:
        keys = sorted(set(store.ledger_keys()) | set(store.conversation_keys()))
    report = AuditReport()
    window = deployment.settings().delivered_batch_window
    client: Honcho | None = None
    for done, key in enumerate(keys):
        if progress is not None:
            progress(done, len(keys))
        try:
            ledger = store.read_ledger(key)
            records = _records(deployment, key)
            if ledger is None:
                name = conversation_id or (records[0]["conversation_id"] if records else key)
                ledger = Ledger(conversation_id=str(name))
            messages: list[dict[str, Any]] = []
            for _ in range(STABLE_TRIES):
                if ledger.session_id is None:
                    break
                if client is None:
                    client = adapter.read_client(deployment.honcho_target())
                messages = adapter.list_messages(client, ledger.session_id)
                # A delivery between the reads would look like damage: read again until
                # the ledger is the same after the listing as before it.
                after = store.read_ledger(key)
                if after is None or after == ledger:
                    break
                ledger, records = after, _records(deployment, key)
            report.conversations.append(
                compare(key, ledger, records, messages, batch_window=window)
            )
        except MemhonchoError as exc:
            report.conversations.append(
                ConversationAudit(
                    conversation_id=conversation_id or key,
                    conversation_key=key,
                    error={"code": exc.code, "message": exc.message},
                )
            )
    if progress is not None:
        progress(len(keys), len(keys))
    report.duration_s = time.monotonic() - started
    return report


def compare(
    key: str,
    ledger: Ledger,
    records: list[Record],
    messages: list[dict[str, Any]],
    *,
    batch_window: int,
) -> ConversationAudit:
    """The audit of one conversation from what it holds locally and what Honcho holds: pure."""
    result = ConversationAudit(
        conversation_id=ledger.conversation_id,
        conversation_key=key,
        session_id=ledger.session_id,
        held=len(messages),
        delivered=ledger.messages_delivered,
        in_flight=len(ledger.in_flight),
    )
    # Capture order of every batch the ledger or the outbox still names.
    order: dict[str, int] = {}
    for delivered_batch in ledger.delivered_batches:
        order.setdefault(delivered_batch, len(order))
    outbox_ids: dict[str, list[str]] = {}
    for record in records:
        order.setdefault(str(record["batch_id"]), len(order))
        outbox_ids[str(record["batch_id"])] = [str(m["id"]) for m in record.get("messages") or []]
    delivered_ids = {
        mid
        for r in records
        if r["seq"] <= ledger.delivered_seq
        for mid in outbox_ids[r["batch_id"]]
    } | set(ledger.delivered_partial)
    in_flight = set(ledger.in_flight)
    result.pending = sum(
        1
        for r in records
        if r["seq"] > ledger.delivered_seq
        for mid in outbox_ids[r["batch_id"]]
        if mid not in delivered_ids
    )
    window_full = len(ledger.delivered_batches) >= batch_window  # older batches were dropped
    held: dict[str, list[str]] = {}
    indices: dict[str, set[int]] = {}
    firsts: list[tuple[tuple[int, int], str, str, int]] = []  # position, outbox id, id, index
    seen_own = False
    for stored_at, message in enumerate(messages):
        outbox_id = (message.get("metadata") or {}).get(OUTBOX_ID_KEY)
        batch, index = _split(outbox_id)
        if batch is None or index is None:
            result.unknown.append(str(message["id"]))
            continue
        if batch not in order:
            if not seen_own and ledger.fork is not None and ledger.fork.outcome == "clone":
                result.inherited += 1
            elif not seen_own and window_full:
                result.before_window += 1
            else:
                result.unknown.append(str(message["id"]))
            continue
        seen_own = True
        assert isinstance(outbox_id, str)
        copies = held.setdefault(outbox_id, [])
        copies.append(str(message["id"]))
        if len(copies) == 1:  # a copy is reported as a duplicate, not again as out of order
            indices.setdefault(batch, set()).add(index)
            firsts.append(((order[batch], index), outbox_id, str(message["id"]), stored_at))
    in_order = _longest_increasing(firsts)
    previous: str | None = None
    for number, (_, outbox_id, honcho_id, stored_at) in enumerate(firsts):
        if number not in in_order:
            result.out_of_order.append(
                OutOfOrder(
                    outbox_id=outbox_id,
                    honcho_id=honcho_id,
                    stored_at=stored_at,
                    stored_after=previous,
                )
            )
        previous = outbox_id
    result.duplicated = {oid: copies for oid, copies in held.items() if len(copies) > 1}
    missing = set(delivered_ids) - set(held)
    # A delivered batch the outbox no longer holds: its messages are numbered from 0, so a
    # hole below the highest index Honcho holds names a missing message.
    for batch in ledger.delivered_batches:
        if batch in outbox_ids or batch not in indices:
            continue
        missing.update(
            f"{batch}-{i}" for i in range(max(indices[batch])) if i not in indices[batch]
        )
    result.missing = sorted(missing, key=lambda oid: _position(order, oid))
    recorded = {oid for oid in held if oid in delivered_ids or _compacted(oid, outbox_ids)}
    result.unrecorded = sorted(
        (oid for oid in held if oid not in recorded and oid not in in_flight),
        key=lambda oid: _position(order, oid),
    )
    # The ledger counts every message it saw delivered; what no id names any more (compacted
    # from the outbox, or past the window) shows only as a shortfall of that count.
    accounted = len(recorded) + result.before_window + len(result.missing)
    result.missing_unnamed = max(0, ledger.messages_delivered - accounted)
    return result


def _longest_increasing(items: list[tuple[tuple[int, int], str, str, int]]) -> set[int]:
    """Indexes of one longest run of ``items`` increasing in position (patience sorting)."""
    tails: list[int] = []  # tails[k]: index of the smallest end of a run of length k + 1
    back: list[int] = [-1] * len(items)
    for i, (position, *_) in enumerate(items):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if items[tails[mid]][0] < position:
                lo = mid + 1
            else:
                hi = mid
        back[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    kept: set[int] = set()
    i = tails[-1] if tails else -1
    while i >= 0:
        kept.add(i)
        i = back[i]
    return kept


def _compacted(outbox_id: str, outbox_ids: dict[str, list[str]]) -> bool:
    """An id of a delivered batch the outbox no longer holds (the sweep compacted it)."""
    batch, _ = _split(outbox_id)
    return batch is not None and batch not in outbox_ids


def _split(outbox_id: object) -> tuple[str | None, int | None]:
    """``<batch id>-<index>`` -> (batch id, index); (None, None) for anything else."""
    if not isinstance(outbox_id, str) or "-" not in outbox_id:
        return None, None
    batch, _, index = outbox_id.rpartition("-")
    if not index.isdigit():
        return None, None
    return batch, int(index)


def _position(order: dict[str, int], outbox_id: str) -> tuple[int, int]:
    batch, index = _split(outbox_id)
    return (order.get(batch or "", len(order)), index or 0)


def _records(deployment: Deployment, key: str) -> list[Record]:
    """The outbox's good records, parsed without the lock and without repairing anything
    (the file store's; the database's are read as they are)."""
    store = deployment.store()
    if store.kind != "files":
        return store.records(key)
    try:
        data = deployment.layout.outbox(key).read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"could not read the outbox ({exc.strerror})") from None
    return parse(data).records


def render(report: AuditReport) -> str:
    """The audit as a table, then what is wrong in each wrong conversation, then a verdict."""
    header = ("conversation", "held", "delivered", "pending", "missing", "dup", "order", "unknown")
    rows = [header]
    for a in report.conversations:
        rows.append(
            (
                a.conversation_id,
                str(a.held),
                str(a.delivered),
                str(a.pending),
                str(len(a.missing) + a.missing_unnamed),
                str(sum(len(v) - 1 for v in a.duplicated.values())),
                str(len(a.out_of_order)),
                str(len(a.unknown) + len(a.unrecorded)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    for a in report.conversations:
        if a.ok:
            continue
        lines.append(f"{a.conversation_id} (session {a.session_id}):")
        if a.error is not None:
            lines.append(f"  not audited: {a.error['code']}: {a.error['message']}")
        for oid in a.missing:
            lines.append(f"  missing {oid}")
        if a.missing_unnamed:
            lines.append(f"  missing {a.missing_unnamed} more the outbox no longer names")
        for oid, copies in a.duplicated.items():
            lines.append(f"  duplicated {oid}: Honcho messages {', '.join(copies)}")
        for item in a.out_of_order:
            lines.append(
                f"  out of order {item.outbox_id} (Honcho message {item.honcho_id},"
                f" stored at {item.stored_at}, after {item.stored_after})"
            )
        for honcho_id in a.unknown:
            lines.append(f"  unknown Honcho message {honcho_id}")
        for oid in a.unrecorded:
            lines.append(f"  unrecorded {oid}: held by Honcho, pending in the ledger")
    totals = report.totals()
    verdict = (
        "every delivered message is in Honcho once, in capture order"
        if report.ok
        else f"{totals['wrong']} conversations are wrong"
    )
    lines.append(
        f"audited {totals['conversations']} conversations ({totals['held']} messages in Honcho)"
        f" in {report.duration_s:.1f}s: {verdict}"
    )
    return "\n".join(lines)
