"""The PostgreSQL store: one database shared by hosts and workers on many machines.

Split by what it stores: ``connection`` (the pool, advisory locks, errors, the schema check),
``records`` (the outbox and the capture clock), ``ledgers`` (ledgers, forks, clone markers) and
``kept`` (dead letters, quarantine, departures, markers, snapshots, the census). Each part is a
mixin over ``PgConnections``; ``PostgresStore`` is their sum behind the ``Store`` interface.
"""

from __future__ import annotations

from memhoncho.store.base import Store
from memhoncho.store.postgres.connection import (
    LOCK_TIMEOUT_MS,
    POOL_MAX,
    SCHEMA_REVISION,
    PgConnections,
    check_schema,
)
from memhoncho.store.postgres.kept import PgKept
from memhoncho.store.postgres.ledgers import PgLedgers
from memhoncho.store.postgres.records import APPEND_SQL, PgRecords

__all__ = [
    "APPEND_SQL",
    "LOCK_TIMEOUT_MS",
    "POOL_MAX",
    "SCHEMA_REVISION",
    "PgConnections",
    "PostgresStore",
    "check_schema",
]


class PostgresStore(PgRecords, PgLedgers, PgKept, Store):
    """The ``Store`` interface over one PostgreSQL database (``store_url = postgresql://...``)."""

    kind = "postgresql"
