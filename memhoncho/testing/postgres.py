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

from memhoncho.testing.ports import free_port

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
    "memhoncho_task_results",
    "memhoncho_heartbeats",
    "memhoncho_representations",
    "memhoncho_celery_results",
    "memhoncho_relay_requests",
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
def private_database(server_url: str, *, upgrade: bool = True) -> Iterator[str]:
    """A database of this test's own on ``server_url``, at the current schema (``upgrade``
    False: empty), dropped afterwards."""
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
        if upgrade:
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


class PrivateCluster:
    """A PostgreSQL server of its own (``initdb`` + ``pg_ctl``) in a temporary directory, on a
    free port, so a test can stop and restart it without touching anyone else's server.

    Run as root, the server runs as the ``postgres`` user (``initdb`` refuses root).
    """

    def __init__(self, bin_dir: str | None = None) -> None:
        import shutil
        import tempfile
        from pathlib import Path

        self.bin_dir = Path(bin_dir or _postgres_bin_dir())
        self.root = Path(tempfile.mkdtemp(prefix="memhoncho-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        import subprocess

        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> PrivateCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        import shutil

        try:
            self.stop("immediate")
        except Exception:
            pass  # not running
        shutil.rmtree(self.root, ignore_errors=True)


def _postgres_bin_dir() -> str:
    import glob

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        import pytest

        if os.environ.get("CI"):
            pytest.fail("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    return os.path.dirname(found[-1])
