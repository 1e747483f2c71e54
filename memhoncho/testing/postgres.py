"""A private PostgreSQL database for a test session (or a host's own tests).

``private_database(server_url)`` creates ``memhoncho_test_<pid>_<random>`` through the server's
maintenance database, brings it to the current schema (``memhoncho db upgrade``), yields its
URL and drops it at the end. Without a reachable server it skips the tests, or fails them when
``CI`` is set (CI must start PostgreSQL: ``.ci/run``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

CONNECT_TIMEOUT_S = 2  # seconds to reach the test server before skipping
TABLES = (
    "memhoncho_conversations",
    "memhoncho_outbox",
    "memhoncho_forks",
    "memhoncho_fork_decisions",
    "memhoncho_clone_markers",
    "memhoncho_dead",
    "memhoncho_quarantine",
    "memhoncho_departures",
    "memhoncho_markers",
)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _unreachable(url: str, exc: Exception) -> None:
    import pytest

    where = urlsplit(url)._replace(netloc=urlsplit(url).hostname or "").geturl()
    message = f"PostgreSQL is not reachable at {where} ({type(exc).__name__})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must start it")
    pytest.skip(message)


@contextmanager
def private_database(server_url: str) -> Iterator[str]:
    import psycopg

    from memhoncho.store import close_stores, schema

    try:
        admin = psycopg.connect(server_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        _unreachable(server_url, exc)
        raise  # not reached: skip and fail raise
    name = f"memhoncho_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        url = with_database(server_url, name)
        schema.upgrade(url)
        yield url
    finally:
        close_stores()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def empty_tables(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY")
