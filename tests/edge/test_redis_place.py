"""The test suite's own Redis: a private server, or a locked empty database, never a neighbour's."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
import redis

from memhoncho.testing import redis_place
from memhoncho.testing.redis_place import OWNER_KEY, RedisPlace


@pytest.fixture
def shared(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """The session's own server stands in for "the machine's Redis" of the claimed mode."""
    client = redis.Redis.from_url(redis_url)
    port = client.connection_pool.connection_kwargs["port"]
    monkeypatch.setattr(redis_place, "SHARED_PORT", port)
    monkeypatch.setattr(redis_place, "CLAIMABLE_DBS", range(4, 7))
    for db in range(4, 7):
        redis.Redis(port=port, db=db).flushdb()
    yield client
    for db in range(4, 7):
        redis.Redis(port=port, db=db).flushdb()
    client.close()


def _db(place: RedisPlace) -> int:
    return int(place.url.rsplit("/", 1)[1])


def test_two_sessions_claim_different_databases_and_a_busy_one_is_skipped(
    shared: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = shared.connection_pool.connection_kwargs["port"]
    redis.Redis(port=port, db=4).set("someone-else", "1")  # not empty: never claimed
    first, second = redis_place._claimed(), redis_place._claimed()
    try:
        assert (first.kind, second.kind) == ("claimed", "claimed")
        assert {_db(first), _db(second)} == {5, 6}
        third = redis_place._claimed()
        assert third.url == "" and "taken" in (third.reason or "")
    finally:
        first.close()
        second.close()
    assert redis.Redis(port=port, db=4).get("someone-else") == b"1"
    again = redis_place._claimed()  # released at close: free again
    try:
        assert _db(again) == 5
    finally:
        again.close()


def test_a_claimed_database_taken_over_by_another_owner_is_not_flushed(
    shared: redis.Redis,
) -> None:
    port = shared.connection_pool.connection_kwargs["port"]
    place = redis_place._claimed()
    other = redis.Redis(port=port, db=_db(place))
    try:
        other.set(OWNER_KEY, "someone-else")
        other.set("their-data", "1")
        with pytest.raises(RuntimeError, match="no longer"):
            place.fresh()
        assert other.get("their-data") == b"1"
    finally:
        other.set(OWNER_KEY, place.owner)
        place.close()
        other.close()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_a_private_server_answers_on_its_own_port_and_stops_at_close() -> None:
    place = redis_place._private(str(shutil.which("redis-server")))
    assert place.kind == "private" and place.url
    client = redis.Redis.from_url(place.url)
    client.set("k", "v")
    place.fresh()
    assert client.dbsize() == 0
    place.close()
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_the_environment_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(redis_place.ENV_URL, "redis://127.0.0.1:1/2")
    place = redis_place.open_place()
    assert (place.url, place.kind) == ("redis://127.0.0.1:1/2", "override")
    assert os.environ[redis_place.ENV_URL] == place.url
