"""The PostgreSQL store: one database shared by hosts and workers on many machines.

The transactional-outbox pattern: a capture is one short transaction (the conversation's row
is locked and its ``last_seq`` bumped, the record inserted) committed with
``synchronous_commit=on`` before ``capture`` returns, so two hosts capturing turns of one
conversation get seqs in the order their captures committed. A database that cannot be reached
within ``store_timeout_s`` (default 2 s: the connect timeout and the pool's wait) is a
``StoreUnavailable`` at once, never an acknowledgement.

A conversation is serialized by a session advisory lock (``pg_try_advisory_lock`` on a 64-bit
hash of its key) held on a connection set aside for the holder: the server releases it when
that connection ends, so a worker killed mid-delivery frees it. Ledger writes of the holder go
through that same connection, so a holder whose connection (and with it the lock) was lost
cannot write over the next holder: its write fails.

One connection pool per process, created on first use (never at import, and again in a forked
child); psycopg is imported only when a store URL names PostgreSQL. The schema version is
checked when the pool is made (``StoreSchemaBehind``: run ``memhoncho db upgrade``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from memhoncho.errors import (
    CaptureTooLarge,
    CorruptFile,
    LockBusy,
    OutboxCapacity,
    StoreError,
    StoreSchemaBehind,
    StoreUnavailable,
)
from memhoncho.models import ForkDecision, Ledger, Snapshot
from memhoncho.store.base import (
    Appended,
    Record,
    Seen,
    Store,
    SweepListing,
    dead_records_added,
)
from memhoncho.store.outbox import encode_line, run_conflict

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from memhoncho.store.base import Census
    from memhoncho.store.forks import ForkRecord

#: the migration this code needs (``memhoncho/store/migrations/versions``); see ``schema_head``
SCHEMA_REVISION = "0004"
POOL_MAX = 10  # connections per process: a worker thread may hold a lock and use another
#: milliseconds a statement waits for a row lock (a capture behind a stalled one, a worker
#: behind a committing capture) before it fails with StoreUnavailable rather than hang
LOCK_TIMEOUT_MS = 5000
#: TCP keepalive probes (seconds idle, seconds apart, count): a server gone from the network is
#: noticed on an idle pooled connection, not by the next capture
KEEPALIVES = (5, 2, 3)
LOCK_POLL_S = 0.05  # seconds between tries while waiting for an advisory lock
#: advisory lock namespaces (the seed of ``hashtextextended``), so memhoncho's locks do not
#: meet an application's own advisory locks on the same database by accident
CONVERSATION_LOCK_SEED = 0x6D656D68  # "memh"
DEAD_LOCK_SEED = 0x64656164  # "dead"
LAST_DELIVERY = "last-delivery"
M = TypeVar("M", bound=BaseModel)

#: One statement, one round trip: bump the conversation's clock under its row lock (so two
#: hosts' captures of one conversation are ordered by commit), then insert the record with that
#: seq unless the ledger's delivered window or the outbox knows its batch. The third column is
#: None for a duplicate (the caller rolls the clock back with it); the fourth is the content
#: digest already known for the batch (outbox or ledger, read before this statement's writes).
APPEND_SQL = """
WITH c AS (
    INSERT INTO memhoncho_conversations AS c
        (key, conversation_id, last_seq, pending_batches, pending_messages)
    VALUES (%(key)s, %(conversation_id)s, 1, 1, %(messages)s)
    ON CONFLICT (key) DO UPDATE SET last_seq = c.last_seq + 1,
        pending_batches = c.pending_batches + 1,
        pending_messages = c.pending_messages + %(messages)s
    RETURNING c.last_seq, c.delivered_seq,
        coalesce(c.ledger -> 'delivered_batches' ? %(batch_id)s, false) AS delivered_before
), o AS (
    INSERT INTO memhoncho_outbox (key, seq, batch_id, captured_at, messages, record)
    SELECT %(key)s, c.last_seq, %(batch_id)s, %(captured_at)s, %(messages)s, %(record)s::jsonb
    FROM c WHERE NOT c.delivered_before
    ON CONFLICT (key, batch_id) DO NOTHING
    RETURNING seq
)
SELECT c.last_seq, c.delivered_seq, (SELECT seq FROM o),
    coalesce(
        (SELECT r.record ->> 'digest' FROM memhoncho_outbox r
         WHERE r.key = %(key)s AND r.batch_id = %(batch_id)s),
        (SELECT c2.ledger -> 'delivered_digests' ->> %(batch_id)s
         FROM memhoncho_conversations c2 WHERE c2.key = %(key)s)
    )
FROM c
"""
PENDING_EDGE_SQL = "SELECT seq, record FROM memhoncho_outbox WHERE key = %s ORDER BY seq {} LIMIT 1"


def _record(seq: int, record: dict[str, Any]) -> Record:
    return cast(Record, {**record, "seq": seq})  # jsonb as the capture stored it


class PostgresStore(Store):
    kind = "postgresql"

    def __init__(self, url: str, *, connect_timeout_s: float = 2.0) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._pool: ConnectionPool | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        self._held = threading.local()  # key -> the connection holding its conversation lock

    # ---- connections -----------------------------------------------------------------------

    def pool(self) -> ConnectionPool:
        """This process's pool (a forked child makes its own: sockets are not shared)."""
        pool = self._pool
        if pool is not None and self._pool_pid == os.getpid():
            return pool
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = self._open_pool()
                self._pool_pid = os.getpid()
            return self._pool

    def _connect_kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,
            "connect_timeout": max(1, round(self.connect_timeout_s)),
            # Durable at commit, whatever the database's default says; no endless lock wait.
            "options": f"-c synchronous_commit=on -c lock_timeout={LOCK_TIMEOUT_MS}",
            "keepalives": 1,
            "keepalives_idle": KEEPALIVES[0],
            "keepalives_interval": KEEPALIVES[1],
            "keepalives_count": KEEPALIVES[2],
            # Sent data unacknowledged this long (a server gone mid-statement): give up, so a
            # capture fails in bounded time instead of waiting on TCP retransmits.
            "tcp_user_timeout": round(self.connect_timeout_s * 1000) + LOCK_TIMEOUT_MS,
        }

    def _open_pool(self) -> ConnectionPool:
        """A pool, once one direct connection proved the database is up and at the schema.

        The probe keeps an outage cheap: no pool (and none of its threads) is made while the
        database cannot be reached, and the first call after it is back connects at once
        rather than after the pool's own reconnect backoff.
        """
        import psycopg
        from psycopg_pool import ConnectionPool

        try:
            with psycopg.connect(self.url, **self._connect_kwargs()) as probe:
                check_schema(probe)
        except psycopg.Error as exc:
            raise _store_error(exc) from None
        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=POOL_MAX,
            open=False,
            timeout=self.connect_timeout_s,
            # A connection that a database restart ended is found here, not by a capture.
            check=ConnectionPool.check_connection,
            kwargs=self._connect_kwargs(),
            name="memhoncho",
        )
        pool.open(wait=False)
        return pool

    def _discard_pool(self, pool: ConnectionPool) -> None:
        """Drop a pool that could not hand out a connection (the database went away); the
        next call probes again. Closed in the background: its workers may be mid-connect."""
        with self._pool_lock:
            if self._pool is pool:
                self._pool = None
        closer = threading.Thread(
            target=pool.close, kwargs={"timeout": self.connect_timeout_s + 1}, daemon=True
        )
        closer.start()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit); database errors become StoreError subclasses."""
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self.pool()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout:
            if not pool.get_stats().get("pool_size"):  # none left: the database went away
                self._discard_pool(pool)
            raise StoreUnavailable(
                f"no connection to the store's database within {self.connect_timeout_s:g} s "
                f"(it is unreachable, or this process's {POOL_MAX} connections are all busy)"
            ) from None
        except psycopg.Error as exc:
            raise _store_error(exc) from None

    @contextmanager
    def _writer(self, key: str) -> Iterator[psycopg.Connection[Any]]:
        """The lock holder's own connection when this thread holds ``key``'s lock, else a
        pooled one: a write under a lost lock fails with its connection."""
        import psycopg

        held = getattr(self._held, "conns", {}).get(key)
        if held is None:
            with self.connection() as conn:
                yield conn
            return
        try:
            yield held
        except psycopg.Error as exc:
            raise _store_error(exc) from None

    def _document(self, sql: str, key: str, model: type[M], what: str) -> M | None:
        """The JSON document ``sql`` selects for ``key``, as ``model``; None without one;
        CorruptFile ("``what`` is corrupt", naming the key) when it does not validate."""
        with self.connection() as conn:
            row = conn.execute(sql, (key,)).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return model.model_validate(row[0])
        except ValidationError:
            raise CorruptFile(f"{what} is corrupt", file=key) from None

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.close(timeout=1)

    # ---- the outbox ------------------------------------------------------------------------

    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> Appended:
        body = {k: v for k, v in record.items() if k != "seq"}
        if max_bytes is not None:  # the same ceiling as an outbox line of the file store
            size = len(encode_line({**body, "seq": time.time_ns() // 1000}))
            if size > max_bytes:
                raise CaptureTooLarge(
                    f"the run is {size} bytes; the limit is {max_bytes} bytes", limit=max_bytes
                )
        batch_id = str(record["batch_id"])
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        with self.connection() as conn:
            seq = self._append(conn, key, record, batch_id, payload, max_pending, after_write)
        if seq is None:
            return Appended(duplicate=True)
        return Appended(duplicate=False, seq=seq)

    def _append(
        self,
        conn: psycopg.Connection[Any],
        key: str,
        record: Record,
        batch_id: str,
        payload: str,
        max_pending: int,
        after_write: Callable[[], object] | None,
    ) -> int | None:
        import psycopg

        with conn.transaction() as tx:
            row = conn.execute(
                APPEND_SQL,
                {
                    "key": key,
                    "conversation_id": record.get("conversation_id"),
                    "batch_id": batch_id,
                    "captured_at": _float_or_none(record.get("captured_at")),
                    "messages": len(record.get("messages") or []),
                    "record": payload,
                },
            ).fetchone()
            assert row is not None
            seq, delivered_seq, inserted, known_digest = int(row[0]), int(row[1]), row[2], row[3]
            if inserted is None:  # delivered within the ledger's window, or in the outbox
                conflict = run_conflict(known_digest, record)
                raise conflict if conflict is not None else psycopg.Rollback(tx)
            # Pending records have distinct seqs in (delivered_seq, seq]: count them only when
            # there may be more than ``max_pending``.
            if seq - delivered_seq > max_pending:
                count_row = conn.execute(
                    "SELECT count(*) FROM memhoncho_outbox WHERE key = %s AND NOT delivered",
                    (key,),
                ).fetchone()
                pending = (int(count_row[0]) if count_row else 0) - 1  # less this record
                if pending >= max_pending:
                    raise OutboxCapacity(
                        f"the conversation has {pending} undelivered batches; "
                        f"the limit is {max_pending}",
                        limit=max_pending,
                    )
            if after_write is not None:
                # Published while the commit is flushed, as the file store does beside its
                # fsync: a woken worker's ``newest_seq`` waits on this row's lock, so it sees
                # the record once committed (and nothing, harmlessly, if the commit fails).
                try:
                    after_write()
                except Exception:  # a hint is never worth failing a durable capture for
                    pass
            return seq
        return None  # rolled back: a duplicate

    def records(self, key: str) -> list[Record]:
        return self.pending(key, -(2**62))

    def pending(self, key: str, after_seq: int) -> list[Record]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT seq, record FROM memhoncho_outbox WHERE key = %s AND seq > %s ORDER BY seq",
                (key, after_seq),
            ).fetchall()
        return [_record(seq, record) for seq, record in rows]

    def edges(self, key: str) -> tuple[Record | None, Record | None]:
        with self.connection() as conn:
            first = conn.execute(PENDING_EDGE_SQL.format("ASC"), (key,)).fetchone()
            if first is None:
                return None, None
            last = conn.execute(PENDING_EDGE_SQL.format("DESC"), (key,)).fetchone()
        assert last is not None
        return _record(*first), _record(*last)

    def newest_seq(self, key: str) -> int:
        """The conversation's capture clock, once any capture still committing is done.

        ``FOR SHARE`` waits on the row a committing capture holds. A conversation's first
        capture creates that row, which no other transaction sees yet: then an insert of the
        same key waits for it (a unique-key conflict in progress), and the row is read again.
        (With no capture at all, that leaves an empty row behind: the clock at 0, harmless.)
        """
        sql = "SELECT last_seq FROM memhoncho_conversations WHERE key = %s FOR SHARE"
        with self.connection() as conn:
            row = conn.execute(sql, (key,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO memhoncho_conversations (key) VALUES (%s)"
                    " ON CONFLICT (key) DO NOTHING",
                    (key,),
                )
                row = conn.execute(sql, (key,)).fetchone()
        return int(row[0]) if row else 0

    def rewrite(
        self,
        key: str,
        keep: Callable[[Record], bool],
        before_replace: Callable[[list[Record]], None] | None = None,
    ) -> tuple[list[Record], list[Record]]:
        with self.connection() as conn, conn.transaction():
            rows = conn.execute(
                "SELECT seq, record FROM memhoncho_outbox WHERE key = %s ORDER BY seq FOR UPDATE",
                (key,),
            ).fetchall()
            records = [_record(seq, record) for seq, record in rows]
            kept = [r for r in records if keep(r)]
            dropped = [r for r in records if not keep(r)]
            if not dropped:
                return kept, []
            if before_replace is not None:
                before_replace(dropped)  # committed on its own connection before the delete
            _delete_records(conn, key, "seq = ANY(%(seqs)s)", [r["seq"] for r in dropped])
        return kept, dropped

    def compact_delivered(self) -> dict[str, int]:
        """One statement: delivered records (flagged by ``write_ledger`` in the transaction that
        moved ``delivered_seq``) leave the outbox; retention still looks at each pending one."""
        with self.connection() as conn:
            rows = conn.execute(
                "WITH d AS (DELETE FROM memhoncho_outbox WHERE delivered RETURNING key)"
                " SELECT key, count(*) FROM d GROUP BY key"
            ).fetchall()
        return {key: int(count) for key, count in rows}

    def remove_outbox(self, key: str) -> None:
        with self.connection() as conn:
            _delete_records(conn, key, "true", [])

    def conversation_keys(self) -> list[str]:
        with self.connection() as conn:
            return _distinct_keys(conn, "memhoncho_outbox")

    def sweep_listing(self) -> SweepListing:
        """Conversations holding any record, with their ledger and edges, in one query.

        Once delivered records are compacted (``compact_delivered``) the outbox holds pending
        work only, so this reads the work, not the history. A ledger that does not validate is
        left out of ``seen``: the sweep reads it again and reports it.
        """
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (o.key) o.key, o.seq, o.record,"
                " max(o.seq) OVER (PARTITION BY o.key), c.ledger"
                " FROM memhoncho_outbox o LEFT JOIN memhoncho_conversations c ON c.key = o.key"
                " ORDER BY o.key, o.seq"
            ).fetchall()
            count = conn.execute("SELECT count(*) FROM memhoncho_conversations").fetchone()
        seen: dict[str, Seen] = {}
        for key, seq, record, last_seq, ledger_doc in rows:
            try:
                ledger = Ledger.model_validate(ledger_doc) if ledger_doc is not None else None
            except ValidationError:
                continue
            last = cast(Record, {"seq": int(last_seq)})
            seen[key] = (ledger, _record(seq, record), last)
        keys = [row[0] for row in rows]
        listed = int(count[0]) if count else len(keys)
        return SweepListing(listed=listed, keys=keys, unchanged=listed - len(keys), seen=seen)

    # ---- serialization -----------------------------------------------------------------------

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

    @contextmanager
    def _advisory(
        self, key: str, seed: int, timeout_s: float | None
    ) -> Iterator[psycopg.Connection[Any]]:
        with self.connection() as conn:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, %s))", (key, seed)
                ).fetchone()
                if row and row[0]:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockBusy()
                time.sleep(LOCK_POLL_S)
            try:
                yield conn
            finally:
                # A connection that died took the lock with it; the pool discards it.
                if not conn.closed and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, %s))", (key, seed))

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
                        (key, _float_or_none(r.get("dead_at")), json.dumps(r, ensure_ascii=False))
                        for r in remaining
                    ],
                )

    def dead_keys(self) -> list[str]:
        with self.connection() as conn:
            return _distinct_keys(conn, "memhoncho_dead")

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
            dead_keys = len(_distinct_keys(conn, "memhoncho_dead"))
            quarantine_keys = len(_distinct_keys(conn, "memhoncho_quarantine"))
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


# ---- helpers ---------------------------------------------------------------------------------


def _delete_records(conn: psycopg.Connection[Any], key: str, where: str, seqs: list[int]) -> None:
    """Delete some of a conversation's records; the pending ones leave its counters too."""
    conn.execute(
        f"WITH d AS (DELETE FROM memhoncho_outbox WHERE key = %(key)s AND {where}"
        "  RETURNING delivered, messages)"
        " UPDATE memhoncho_conversations SET"
        "  pending_batches = pending_batches - (SELECT count(*) FROM d WHERE NOT delivered),"
        "  pending_messages = pending_messages"
        "   - (SELECT coalesce(sum(messages), 0) FROM d WHERE NOT delivered)"
        " WHERE key = %(key)s",
        {"key": key, "seqs": seqs},
    )


def _distinct_keys(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """The distinct ``key`` values of ``table``, sorted, by a loose index scan: one index
    probe per key rather than a pass over every row (PostgreSQL has no skip scan)."""
    rows = conn.execute(
        "WITH RECURSIVE k AS ("
        f" (SELECT key FROM {table} ORDER BY key LIMIT 1)"
        " UNION ALL"
        f" SELECT (SELECT t.key FROM {table} t WHERE t.key > k.key ORDER BY t.key LIMIT 1)"
        " FROM k WHERE k.key IS NOT NULL"
        ") SELECT key FROM k WHERE key IS NOT NULL"
    ).fetchall()
    return [r[0] for r in rows]


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _store_error(exc: Exception) -> StoreError:
    """A database error as memhoncho's: unreachable or cut off is StoreUnavailable."""
    import psycopg

    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return StoreUnavailable(
            f"a lock in the store's database was not granted within {LOCK_TIMEOUT_MS} ms"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailable(f"the store's database cannot be reached ({type(exc).__name__})")
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return StoreSchemaBehind(
            "the store's database has no memhoncho schema; run: memhoncho db upgrade"
        )
    return StoreError(f"the store's database refused the operation ({type(exc).__name__})")


def check_schema(conn: psycopg.Connection[Any]) -> None:
    """StoreSchemaBehind unless the database is at ``SCHEMA_REVISION`` (one cheap query)."""
    import psycopg

    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except psycopg.errors.UndefinedTable:
        raise StoreSchemaBehind(
            "the store's database has no memhoncho schema; run: memhoncho db upgrade"
        ) from None
    found = row[0] if row else None
    if found != SCHEMA_REVISION:
        raise StoreSchemaBehind(
            f"the store's database schema is at {found or 'nothing'}, this memhoncho needs "
            f"{SCHEMA_REVISION}; run: memhoncho db upgrade",
            found=found,
            needed=SCHEMA_REVISION,
        )
