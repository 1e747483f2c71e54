"""Shared fixtures: isolated dirs, a real Redis database. The stand-in, dirs, deployment, host
and worker fixtures come from memhoncho's own pytest plugin (``memhoncho.testing``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["memhoncho.testing.pytest_plugin"]

REDIS_URL = os.environ.get("MEMHONCHO_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's memhoncho settings, key or dirs."""
    for name in list(os.environ):
        if name.startswith(("MEMHONCHO_", "HONCHO_")) and not name.startswith("MEMHONCHO_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MEMHONCHO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real, empty Redis database: skipped without one on a laptop, a failure in CI."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        if os.environ.get("CI"):
            pytest.fail(f"Redis is not reachable at {REDIS_URL} (CI must start it)")
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    client.flushdb()
    yield REDIS_URL
    client.flushdb()
    client.close()


@pytest.fixture(autouse=True)
def _fresh_honcho_clients() -> Iterator[None]:
    """No test reuses a Honcho client (and its connections) built by another."""
    from memhoncho.honcho import adapter

    adapter.close_clients()
    yield
    adapter.close_clients()
