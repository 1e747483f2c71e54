"""The PostgreSQL store's other tables: dead letters, quarantine, departures, markers,
representation snapshots, and the census the status view reads."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from memhoncho.models import Snapshot
from memhoncho.store.base import Pending, Record, dead_records_added
from memhoncho.store.postgres.connection import (
    DEAD_LOCK_SEED,
    LAST_DELIVERY,
    PgConnections,
    distinct_keys,
    float_or_none,
)

if TYPE_CHECKING:
    from memhoncho.store.base import Census


class PgKept(PgConnections):
    """What the store keeps beside the outbox and the ledgers."""

    # ---- dead letters ------------------------------------------------------------------------

    def dead_lock(self, key: str) -> AbstractContextManager[None]:
        @contextmanager
        def held() -> Iterator[None]:
            with self._advisory(key, DEAD_LOCK_SEED, None):
                yield

        return held()

    def append_dead(self, key: str, records: list[Record], reason: str) -> int:
        dead = dead_records_added(records, reason, time.time())
        if not dead:
            return 0
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memhoncho_dead (key, dead_at, record) VALUES (%s, %s, %s::jsonb)",
                [(key, r["dead_at"], json.dumps(r, ensure_ascii=False)) for r in dead],
            )
        return len(dead)

    def read_dead(self, key: str) -> list[Record]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT record FROM memhoncho_dead WHERE key = %s ORDER BY id", (key,)
            ).fetchall()
        return [r[0] for r in rows]

    def replace_dead(self, key: str, remaining: list[Record]) -> None:
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("DELETE FROM memhoncho_dead WHERE key = %s", (key,))
            if remaining:
                cur.executemany(
                    "INSERT INTO memhoncho_dead (key, dead_at, record) VALUES (%s, %s, %s::jsonb)",
                    [
                        (key, float_or_none(r.get("dead_at")), json.dumps(r, ensure_ascii=False))
                        for r in remaining
                    ],
                )

    def dead_keys(self) -> list[str]:
        with self.connection() as conn:
            return distinct_keys(conn, "memhoncho_dead")

    # ---- quarantine (what ``store migrate`` carries over from a file store) -------------------

    def add_quarantined(self, key: str, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memhoncho_quarantine (key, entry) VALUES (%s, %s::jsonb)",
                [(key, json.dumps(e)) for e in entries],
            )

    # ---- departures and the last-delivery marker ---------------------------------------------

    def write_departure(self, peer_id: str, departure: dict[str, Any]) -> None:
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_departures (peer_id, departure) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (peer_id) DO UPDATE SET departure = excluded.departure",
                (peer_id, json.dumps(departure)),
            )

    def departures(self) -> tuple[list[dict[str, Any]], list[str]]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT peer_id, departure FROM memhoncho_departures ORDER BY peer_id"
            ).fetchall()
        return [{"peer_id": peer, **value} for peer, value in rows], []

    def mark_last_delivery(self, marker: dict[str, Any]) -> None:
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_markers (name, value) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value"
                " WHERE (memhoncho_markers.value ->> 'at')::float8"
                " <= (excluded.value ->> 'at')::float8",
                (LAST_DELIVERY, json.dumps(marker)),
            )

    def last_delivery(self) -> tuple[float | None, str | None]:
        from memhoncho.store.files import marker_time

        with self.connection() as conn:
            row = conn.execute(
                "SELECT value FROM memhoncho_markers WHERE name = %s", (LAST_DELIVERY,)
            ).fetchone()
        if row is None:
            return None, None
        return marker_time(row[0], LAST_DELIVERY)

    # ---- representation snapshots -------------------------------------------------------------

    def write_snapshot(self, key: str, snapshot: Snapshot) -> None:
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_representations (key, snapshot, fetched_at)"
                " VALUES (%s, %s::jsonb, %s) ON CONFLICT (key) DO UPDATE"
                " SET snapshot = excluded.snapshot, fetched_at = excluded.fetched_at",
                (key, snapshot.model_dump_json(), snapshot.fetched_at),
            )

    def read_snapshot(self, key: str) -> Snapshot | None:
        """One primary-key SELECT: within ``store_timeout_s`` for a connection, and the lock
        and TCP timeouts of every statement (see ``_connect_kwargs``)."""
        sql = "SELECT snapshot FROM memhoncho_representations WHERE key = %s"
        return self._document(sql, key, Snapshot, "the representation snapshot")

    def snapshot_times(self) -> dict[str, float | None]:
        # The column written beside each document: a row is written whole, so it is the
        # document's own ``fetched_at`` (a row edited by hand is found corrupt when read).
        with self.connection() as conn:
            rows = conn.execute("SELECT key, fetched_at FROM memhoncho_representations").fetchall()
        return {key: fetched_at for key, fetched_at in rows}

    def remove_snapshot(self, key: str) -> bool:
        with self.connection() as conn:
            row = conn.execute(
                "DELETE FROM memhoncho_representations WHERE key = %s RETURNING key", (key,)
            ).fetchone()
        return row is not None

    # ---- status ------------------------------------------------------------------------------

    def pending_conversations(self, hinted_after: float) -> list[Pending]:
        """One query over the pending conversations' partial index (``pending_batches > 0``):
        each row carries its hint mark, its ledger's open send and newest failure, and the
        capture time of its first pending record (one probe of the pending records' index;
        the oldest capture but for a clock stepped back). No ledger is read row by row."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT c.key, c.conversation_id, c.hint_at,"
                " (SELECT o.captured_at FROM memhoncho_outbox o"
                "  WHERE o.key = c.key AND NOT o.delivered ORDER BY o.seq LIMIT 1),"
                " CASE WHEN c.ledger->'in_flight' <> '[]'::jsonb THEN"
                "  coalesce((c.ledger->>'in_flight_since')::float8, 'Infinity') END,"
                " CASE WHEN (c.ledger->>'failures')::bigint > 0"
                "  AND jsonb_typeof(c.ledger->'last_error'->'at') = 'number'"
                "  THEN (c.ledger->'last_error'->>'at')::float8 END,"
                " c.last_delivered_at"
                " FROM memhoncho_conversations c"
                " WHERE c.pending_batches > 0 AND (c.hint_at IS NULL OR c.hint_at < %s)",
                (hinted_after,),
            ).fetchall()
        return [
            Pending(key, float(oldest or 0.0), hint, flight, failed, delivered, conversation)
            for key, conversation, hint, oldest, flight, failed, delivered in rows
        ]

    def census(self) -> Census:
        """Aggregates over partial indexes: pending rows only, sessions only."""
        from memhoncho.store.base import Census

        with self.connection() as conn:
            row = conn.execute(
                "SELECT"
                # A conversation is one with a ledger or a record (its row outlives both:
                # it keeps the capture clock).
                " (SELECT count(*) FROM memhoncho_conversations c WHERE c.ledger IS NOT NULL"
                "  OR EXISTS (SELECT 1 FROM memhoncho_outbox o WHERE o.key = c.key)),"
                " (SELECT count(*) FROM memhoncho_conversations WHERE ledger IS NOT NULL),"
                " (SELECT count(*) FROM memhoncho_conversations WHERE has_session),"
                " (SELECT max(last_delivered_at) FROM memhoncho_conversations),"
                " (SELECT count(*) FROM memhoncho_dead),"
                " (SELECT count(*) FROM memhoncho_quarantine)"
            ).fetchone()
            # Sums of the per-conversation counters (one row per conversation with pending
            # work, by a partial index), and the oldest by the pending-age index: no pass over
            # the records, however many are pending.
            pending = conn.execute(
                "SELECT coalesce(sum(pending_batches), 0), coalesce(sum(pending_messages), 0),"
                " (SELECT min(captured_at) FROM memhoncho_outbox WHERE NOT delivered), count(*)"
                " FROM memhoncho_conversations WHERE pending_batches > 0"
            ).fetchone()
            dead_keys = len(distinct_keys(conn, "memhoncho_dead"))
            quarantine_keys = len(distinct_keys(conn, "memhoncho_quarantine"))
        assert row is not None and pending is not None
        return Census(
            conversations=int(row[0]),
            ledgers=int(row[1]),
            sessions=int(row[2]),
            newest_delivery_at=row[3],
            pending_batches=int(pending[0]),
            pending_messages=int(pending[1]),
            oldest_pending_at=pending[2],
            conversations_pending=int(pending[3]),
            dead_files=dead_keys,
            dead_records=int(row[4]),
            quarantine_files=quarantine_keys,
            quarantined_lines=int(row[5]),
        )
