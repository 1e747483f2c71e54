"""``memhoncho store migrate --to postgresql://...``: a file store's state copied into PostgreSQL.

What is copied: each conversation's ledger and its pending records (seqs kept, so the ledger's
``delivered_seq`` still means what it meant), pending forks, fork decisions, clone markers,
dead letters, quarantined lines, departures, the last-delivery marker and the representation
snapshots. Delivered records are not: Honcho holds them and the ledger's window still
deduplicates a recapture.

Idempotent: run it twice (or after a crash half way) and nothing is doubled. A conversation the
database already has a ledger for keeps it (the database may have moved on), records are
matched by batch id, forks by child, dead letters by (conversation, batch id); a snapshot
the database has already is kept (a refresh may have written a newer one). Stop hosts and
workers on the file store first, migrate, then point ``store_url`` at the database: records
captured into the files after the copy would otherwise stay behind (run it again to take them).
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from memhoncho.errors import CorruptFile
from memhoncho.models import Record
from memhoncho.store.files import FileStore
from memhoncho.store.layout import keys_in
from memhoncho.store.postgres import PostgresStore


@dataclass
class MigrationReport:
    conversations: int = 0
    ledgers_copied: int = 0
    ledgers_kept: int = 0  #: the database had one already
    records_copied: int = 0
    records_present: int = 0  #: already in the database (a second run)
    forks_copied: int = 0
    decisions_copied: int = 0
    dead_copied: int = 0
    quarantined_copied: int = 0
    departures_copied: int = 0
    snapshots_copied: int = 0
    snapshots_present: int = 0  #: the database had one already
    #: corrupt cache files, left behind: disposable, the next refresh fetches them again
    snapshots_unreadable: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def migrate(source: FileStore, target: PostgresStore) -> MigrationReport:
    report = MigrationReport()
    keys = sorted(set(source.conversation_keys()) | set(source.ledger_keys()))
    for key in keys:
        report.conversations += 1
        try:
            ledger = source.read_ledger(key)
        except CorruptFile:
            report.errors.append(f"ledger of {key} is corrupt: its records are copied as pending")
            ledger = None
        delivered = ledger.delivered_seq if ledger else 0
        pending = source.pending(key, delivered)
        _copy_conversation(target, key, ledger, pending, report)
    for key in source.pending_fork_keys():
        try:
            record = source.read_fork(key)
        except CorruptFile:
            report.errors.append(f"fork record of {key} is corrupt")
            continue
        if record is not None and target.create_fork(key, record):
            report.forks_copied += 1
    _copy_decisions(source, target, report)
    for key in source.dead_keys():
        report.dead_copied += _copy_dead(target, key, source.read_dead(key))
    _copy_quarantine(source, target, report)
    notices, errors = source.departures()
    report.errors.extend(errors)
    for notice in notices:
        peer = str(notice.get("peer_id"))
        target.write_departure(peer, {k: v for k, v in notice.items()})
        report.departures_copied += 1
    marker_path = source.layout.last_delivery
    try:
        target.mark_last_delivery(json.loads(marker_path.read_bytes()))
    except (OSError, ValueError):
        pass  # no marker, or an unreadable one: status falls back to the ledgers
    _copy_snapshots(source, target, report)
    return report


def _copy_conversation(
    target: PostgresStore,
    key: str,
    ledger: Any,
    pending: list[Record],
    report: MigrationReport,
) -> None:
    """One transaction per conversation: its clock, its ledger (unless present), its records."""
    newest = max((int(r["seq"]) for r in pending), default=0)
    floor = max(newest, ledger.delivered_seq if ledger else 0)
    conversation_id = ledger.conversation_id if ledger else None
    if conversation_id is None and pending:
        conversation_id = pending[0].get("conversation_id")
    with target.connection() as conn, conn.transaction():
        row = conn.execute(
            "INSERT INTO memhoncho_conversations AS c (key, conversation_id, last_seq)"
            " VALUES (%s, %s, %s) ON CONFLICT (key) DO UPDATE"
            " SET last_seq = greatest(c.last_seq, excluded.last_seq)"
            " RETURNING c.ledger IS NOT NULL",
            (key, conversation_id, floor),
        ).fetchone()
        has_ledger = bool(row and row[0])
        if ledger is not None and not has_ledger:
            conn.execute(
                "UPDATE memhoncho_conversations SET ledger = %s::jsonb, delivered_seq = %s,"
                " has_session = %s, last_delivered_at = %s WHERE key = %s",
                (
                    ledger.model_dump_json(),
                    ledger.delivered_seq,
                    ledger.session_id is not None,
                    ledger.last_delivered_at,
                    key,
                ),
            )
            report.ledgers_copied += 1
        elif ledger is not None:
            report.ledgers_kept += 1
        for record in pending:
            body = {k: v for k, v in record.items() if k != "seq"}
            captured = record.get("captured_at")
            inserted = conn.execute(
                "INSERT INTO memhoncho_outbox (key, seq, batch_id, captured_at, messages, record)"
                " VALUES (%s, %s, %s, %s, %s, %s::jsonb)"
                " ON CONFLICT DO NOTHING RETURNING seq",
                (
                    key,
                    int(record["seq"]),
                    str(record["batch_id"]),
                    float(captured) if isinstance(captured, int | float) else None,
                    len(record.get("messages") or []),
                    json.dumps(body, ensure_ascii=False),
                ),
            ).fetchone()
            if inserted is None:
                report.records_present += 1
            else:
                report.records_copied += 1
        conn.execute(  # the counters the census sums, from what is pending now
            "UPDATE memhoncho_conversations c SET pending_batches = p.batches,"
            " pending_messages = p.messages FROM (SELECT count(*) AS batches,"
            " coalesce(sum(messages), 0) AS messages FROM memhoncho_outbox"
            " WHERE key = %(key)s AND NOT delivered) p WHERE c.key = %(key)s",
            {"key": key},
        )


def _copy_decisions(source: FileStore, target: PostgresStore, report: MigrationReport) -> None:
    from memhoncho.models import ForkDecision

    for key, item in source.read_decisions().items():
        fields = {k: v for k, v in item.items() if k != "child"}
        try:
            decision = ForkDecision.model_validate(fields)
        except ValueError:
            report.errors.append(f"a fork decision of {key} cannot be read")
            continue
        target.append_decision(key, decision)  # an upsert: the latest per child
        report.decisions_copied += 1


def _copy_dead(target: PostgresStore, key: str, records: list[Record]) -> int:
    copied = 0
    with target.connection() as conn, conn.transaction():
        present = {
            row[0]
            for row in conn.execute(
                "SELECT record ->> 'batch_id' FROM memhoncho_dead WHERE key = %s", (key,)
            ).fetchall()
        }
        for record in records:
            batch = record.get("batch_id")
            if batch in present:
                continue
            present.add(batch)
            dead_at = record.get("dead_at")
            conn.execute(
                "INSERT INTO memhoncho_dead (key, dead_at, record) VALUES (%s, %s, %s::jsonb)",
                (
                    key,
                    float(dead_at) if isinstance(dead_at, int | float) else None,
                    json.dumps(record, ensure_ascii=False),
                ),
            )
            copied += 1
    return copied


def _copy_quarantine(source: FileStore, target: PostgresStore, report: MigrationReport) -> None:
    """Quarantined lines are evidence: carried over once (matched by their raw bytes)."""
    try:
        names = sorted(p.name for p in source.layout.quarantine_dir.iterdir())
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        key = name[: -len(".jsonl")]
        entries = []
        for line in (source.layout.quarantine_dir / name).read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"reason": "unreadable", "raw_b64": base64.b64encode(line).decode()}
            if isinstance(entry, dict):
                entries.append(entry)
        with target.connection() as conn:
            present = {
                row[0]
                for row in conn.execute(
                    "SELECT entry ->> 'raw_b64' FROM memhoncho_quarantine WHERE key = %s", (key,)
                ).fetchall()
            }
        fresh = [e for e in entries if e.get("raw_b64") not in present]
        target.add_quarantined(key, fresh)
        report.quarantined_copied += len(fresh)


def _copy_snapshots(source: FileStore, target: PostgresStore, report: MigrationReport) -> None:
    """The representation snapshots, so the prompt sections are not empty until a refresh."""
    for key in keys_in(source.layout.cache_dir, ".json"):  # listed, each read once below
        try:
            snapshot = source.read_snapshot(key)
        except CorruptFile:
            report.snapshots_unreadable += 1
            continue
        if snapshot is None:  # removed since the listing
            continue
        with target.connection() as conn:
            inserted = conn.execute(
                "INSERT INTO memhoncho_representations (key, snapshot, fetched_at)"
                " VALUES (%s, %s::jsonb, %s) ON CONFLICT (key) DO NOTHING RETURNING key",
                (key, snapshot.model_dump_json(), snapshot.fetched_at),
            ).fetchone()
        if inserted is None:
            report.snapshots_present += 1
        else:
            report.snapshots_copied += 1
