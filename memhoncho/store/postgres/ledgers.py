"""The PostgreSQL store's ledgers and forks: what each conversation delivered, under its lock.

A conversation is serialized by a session advisory lock (``pg_try_advisory_lock`` on a 64-bit
hash of its key) held on a connection set aside for the holder: the server releases it when
that connection ends, so a worker killed mid-delivery frees it. Ledger writes of the holder go
through that same connection, so a holder whose connection (and with it the lock) was lost
cannot write over the next holder: its write fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memhoncho.models import ForkDecision, Ledger
from memhoncho.store.postgres.connection import CONVERSATION_LOCK_SEED, PgConnections

if TYPE_CHECKING:
    from memhoncho.store.forks import ForkRecord


class PgLedgers(PgConnections):
    """Ledgers (a row per conversation), fork records, fork decisions and clone markers."""

    @contextmanager
    def conversation_lock(self, key: str, *, timeout_s: float | None = None) -> Iterator[None]:
        with self._advisory(key, CONVERSATION_LOCK_SEED, timeout_s) as conn:
            conns = self._held.__dict__.setdefault("conns", {})
            previous = conns.get(key)
            conns[key] = conn
            try:
                yield
            finally:
                if previous is None:
                    conns.pop(key, None)
                else:
                    conns[key] = previous

    # ---- ledgers -----------------------------------------------------------------------------

    def read_ledger(self, key: str) -> Ledger | None:
        sql = "SELECT ledger FROM memhoncho_conversations WHERE key = %s"
        return self._document(sql, key, Ledger, "the conversation's ledger")

    def write_ledger(self, key: str, ledger: Ledger) -> None:
        with self._writer(key) as conn, conn.transaction():
            conn.execute(
                "INSERT INTO memhoncho_conversations AS c"
                " (key, conversation_id, ledger, delivered_seq, has_session, last_delivered_at)"
                " VALUES (%s, %s, %s::jsonb, %s, %s, %s)"
                " ON CONFLICT (key) DO UPDATE SET ledger = excluded.ledger,"
                " delivered_seq = excluded.delivered_seq, has_session = excluded.has_session,"
                " last_delivered_at = excluded.last_delivered_at,"
                " conversation_id = coalesce(c.conversation_id, excluded.conversation_id)",
                (
                    key,
                    ledger.conversation_id,
                    ledger.model_dump_json(),
                    ledger.delivered_seq,
                    ledger.session_id is not None,
                    ledger.last_delivered_at,
                ),
            )
            # Delivered records leave the pending index (and the counters) now; the sweep
            # deletes them later.
            conn.execute(
                "WITH d AS (UPDATE memhoncho_outbox SET delivered = true"
                "  WHERE key = %(key)s AND seq <= %(seq)s AND NOT delivered RETURNING messages)"
                " UPDATE memhoncho_conversations SET"
                "  pending_batches = pending_batches - (SELECT count(*) FROM d),"
                "  pending_messages = pending_messages - (SELECT coalesce(sum(messages), 0) FROM d)"
                " WHERE key = %(key)s AND EXISTS (SELECT 1 FROM d)",
                {"key": key, "seq": ledger.delivered_seq},
            )

    def ledger_keys(self) -> list[str]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT key FROM memhoncho_conversations WHERE ledger IS NOT NULL ORDER BY key"
            ).fetchall()
        return [r[0] for r in rows]

    # ---- forks -------------------------------------------------------------------------------

    def read_fork(self, key: str) -> ForkRecord | None:
        from memhoncho.store.forks import ForkRecord

        sql = "SELECT record FROM memhoncho_forks WHERE child_key = %s"
        return self._document(sql, key, ForkRecord, "the conversation's fork record")

    def create_fork(self, key: str, record: ForkRecord) -> bool:
        with self.connection() as conn:
            row = conn.execute(
                "INSERT INTO memhoncho_forks (child_key, record, created_at)"
                " VALUES (%s, %s::jsonb, %s) ON CONFLICT (child_key) DO NOTHING"
                " RETURNING child_key",
                (key, record.model_dump_json(), record.created_at),
            ).fetchone()
        return row is not None

    def remove_fork(self, key: str) -> None:
        with self.connection() as conn:
            conn.execute("DELETE FROM memhoncho_forks WHERE child_key = %s", (key,))

    def pending_fork_keys(self) -> list[str]:
        with self.connection() as conn:
            rows = conn.execute("SELECT child_key FROM memhoncho_forks ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def append_decision(self, key: str, decision: ForkDecision) -> None:
        line = {"child": key, **decision.model_dump(mode="json")}
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_fork_decisions (child_key, decision, decided_at)"
                " VALUES (%s, %s::jsonb, %s) ON CONFLICT (child_key) DO UPDATE"
                " SET decision = excluded.decision, decided_at = excluded.decided_at",
                (key, json.dumps(line), decision.decided_at),
            )

    def read_decisions(self) -> dict[str, dict[str, Any]]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT child_key, decision FROM memhoncho_fork_decisions"
            ).fetchall()
        return {key: value for key, value in rows if isinstance(value, dict)}

    def read_clone_marker(self, parent_key: str) -> dict[str, Any] | None:
        with self.connection() as conn:
            row = conn.execute(
                "SELECT marker FROM memhoncho_clone_markers WHERE parent_key = %s",
                (parent_key,),
            ).fetchone()
        if row is None:
            return None
        return row[0] if isinstance(row[0], dict) else {}

    def write_clone_marker(self, parent_key: str, marker: dict[str, Any]) -> None:
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_clone_markers (parent_key, marker) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (parent_key) DO UPDATE SET marker = excluded.marker",
                (parent_key, json.dumps(marker)),
            )

    def remove_clone_marker(self, parent_key: str) -> None:
        with self.connection() as conn:
            conn.execute("DELETE FROM memhoncho_clone_markers WHERE parent_key = %s", (parent_key,))
