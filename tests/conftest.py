"""Shared fixtures: isolated dirs, a real Redis database. The stand-in, dirs, deployment, host
and worker fixtures come from memhoncho's own pytest plugin (``memhoncho.testing``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# scheduling: how many test processes, and which files they start with (tests/scheduling.py)
pytest_plugins = ["memhoncho.testing.pytest_plugin", "scheduling"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's memhoncho settings, key or dirs."""
    for name in list(os.environ):
        if name.startswith(("MEMHONCHO_", "HONCHO_")) and not name.startswith("MEMHONCHO_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MEMHONCHO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(scope="session")
def _redis_place() -> Iterator[Any]:
    """This session's own Redis: MEMHONCHO_TEST_REDIS_URL, else a private redis-server on a
    free port, else a locked, empty database on 127.0.0.1:6379 (``testing/redis_place.py``)."""
    from memhoncho.testing.redis_place import session_place

    with session_place() as place:
        yield place


@pytest.fixture
def redis_url(_redis_place: Any) -> Iterator[str]:
    """A real, empty Redis database: skipped without one on a laptop, a failure in CI."""
    if not _redis_place.url:
        if os.environ.get("CI"):
            pytest.fail(f"no Redis for the tests: {_redis_place.reason}")
        pytest.skip(f"no Redis for the tests: {_redis_place.reason}")
    _redis_place.fresh()
    yield _redis_place.url


@pytest.fixture
def live_env(
    config_dir: Path,
    data_dir: Path,
    redis_url: str,
    standin: Any,
    workspace_id: str,
    standin_settings: Callable[..., dict[str, Any]],
) -> Callable[..., dict[str, str]]:
    """``live_env(**values)``: writes settings that point at the stand-in over this test's Redis
    (plus ``values``); the environment of a memhoncho process on them."""
    from memhoncho.testing.processes import standin_env

    def write(**values: Any) -> dict[str, str]:
        standin_settings(broker_url=redis_url, **values)
        return standin_env(config_dir, data_dir, redis_url, standin, workspace_id)

    return write


@pytest.fixture(autouse=True)
def _fresh_honcho_clients() -> Iterator[None]:
    """No test reuses a Honcho client (and its connections) built by another."""
    from memhoncho.honcho import adapter

    adapter.close_clients()
    yield
    adapter.close_clients()


# ---- PostgreSQL (the store of many machines) ------------------------------------------------

POSTGRES_URL = os.environ.get(
    "MEMHONCHO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A private database on the test server, at this memhoncho's schema, dropped at the end.

    ``MEMHONCHO_TEST_POSTGRES_URL`` names the server (its maintenance database); skipped on a
    laptop without PostgreSQL, a failure in CI.
    """
    from memhoncho.testing.postgres import private_database

    with private_database(POSTGRES_URL) as url:
        yield url


@pytest.fixture
def postgres_url(postgres_database: str) -> Iterator[str]:
    """The private database, emptied for this test (the schema stays)."""
    from memhoncho.store import close_stores
    from memhoncho.testing.postgres import empty_tables

    empty_tables(postgres_database)
    yield postgres_database
    close_stores()


@pytest.fixture(params=["files", "postgresql"])
def store_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Each test that takes it runs on both stores: None (files) and a private database.

    The database is also named in ``MEMHONCHO_STORE_URL``, so a test that rewrites its settings
    file stays on it (worker processes get it from the settings file the test writes).
    """
    if request.param == "files":
        return None
    url: str = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("MEMHONCHO_STORE_URL", url)
    return url


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A folder with a short path under /tmp, for a relay's socket in a data dir below it:
    a UNIX socket's path must fit in 107 bytes, and pytest's tmp_path may not."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="mh-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)
