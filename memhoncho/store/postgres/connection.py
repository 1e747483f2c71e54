"""The PostgreSQL store's connections: one pool per process, the advisory locks, the errors.

One connection pool per process, created on first use (never at import, and again in a forked
child); psycopg is imported only when a store URL names PostgreSQL. The schema version is
checked when the pool is made (``StoreSchemaBehind``: run ``memhoncho db upgrade``). A database
that cannot be reached within ``store_timeout_s`` is a ``StoreUnavailable`` at once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from memhoncho.errors import CorruptFile, LockBusy, StoreError, StoreSchemaBehind, StoreUnavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

#: the migration this code needs (``memhoncho/store/migrations/versions``); see ``schema_head``
SCHEMA_REVISION = "0007"
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


class PgConnections:
    """The pool, the connection a lock holder writes through, and advisory locks."""

    def __init__(self, url: str, *, connect_timeout_s: float = 2.0) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._pool: ConnectionPool | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        self._held = threading.local()  # key -> the connection holding its conversation lock
        self._deployment_id: str | None = None  # read once (migration 0007); it never changes

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

    def deployment_id(self) -> str:
        """The database's identity: what every hint of this deployment carries, whichever
        name a machine reaches the database by (``worker/foreign.py``)."""
        if self._deployment_id is None:
            with self.connection() as conn:
                row = conn.execute("SELECT deployment_id FROM memhoncho_deployment").fetchone()
            if row is None:
                raise StoreError(
                    "the database has no memhoncho identity (memhoncho_deployment is empty):"
                    " run memhoncho db upgrade on a database it made, or restore the row"
                )
            self._deployment_id = str(row[0])
        return self._deployment_id

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
            raise store_error(exc) from None
        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=POOL_MAX,
            open=False,
            timeout=self.connect_timeout_s,
            # A connection that a database restart ended is found here, not by a capture.
            check=check_idle_connection,
            kwargs=self._connect_kwargs(),
            name="memhoncho",
        )
        # Not waited for: the first call finds no connection ready and the pool grows to two
        # (it closes the second once that is ten minutes unused). Waiting for one (wait=True)
        # kept one, and bench capture --store measured 0.1-0.2 worse (2026-12-07, A/B pairs).
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
            raise store_error(exc) from None

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
            raise store_error(exc) from None

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


def distinct_keys(conn: psycopg.Connection[Any], table: str) -> list[str]:
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


def float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def store_error(exc: Exception) -> StoreError:
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


def check_idle_connection(conn: psycopg.Connection[Any]) -> None:
    """The pool's check before it hands a connection out, without a round trip.

    An idle connection has nothing to read; one the server ended (a restart, a terminated
    backend) has its goodbye or EOF waiting on the socket. Only then is it asked (an empty
    query), which fails, so the pool drops it and a capture never meets it. A server gone
    silently is met by the statement, bounded by ``tcp_user_timeout``: StoreUnavailable.
    """
    import select

    import psycopg

    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        conn.execute("")


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
