"""host.close(timeout): in-flight enqueues finish, resources are released, the deadline holds."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from memhoncho import ids
from memhoncho.host import Host
from memhoncho.routing import partition

DEADLINE_S = 0.3  # the close deadline under test
JOIN_S = 30.0  # generous: only a hang fails


PARTITIONS = 256  # captures go to partitions >= 8, which no worker of a concurrent test reads


def _configure(config_dir: Path, broker_url: str) -> None:
    settings = {"broker_url": broker_url, "partitions": PARTITIONS}
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(settings))
    (config_dir / "secrets.json").write_text(json.dumps({"api-key": "k"}))


def _run(conversation: str, run: str) -> dict[str, Any]:
    return {
        "conversation_id": conversation,
        "run_id": run,
        "inputs": [{"entry_id": 1, "text": "hello"}],
        "outcome": {"status": "unanswered"},
    }


def _clients(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(1 for c in client.client_list() if c.get("db") == url.rsplit("/", 1)[1])
    finally:
        client.close()


def test_close_waits_for_in_flight_enqueues_and_releases_the_broker_connections(
    config_dir: Path, data_dir: Path, redis_url: str
) -> None:
    _configure(config_dir, redis_url)
    idle = _clients(redis_url)
    host = Host(config_dir, data_dir)
    results: list[Any] = []
    start = threading.Barrier(5)

    conversations = [c for c in (f"c-{n}" for n in range(100)) if partition(c, PARTITIONS) >= 8]

    def capture(n: int) -> None:
        start.wait()
        for i in range(20):
            results.append(host.capture(_run(conversations[n], f"r{i}")))

    threads = [threading.Thread(target=capture, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    host.close(timeout=25)
    for thread in threads:
        thread.join(JOIN_S)
        assert not thread.is_alive()
    assert all(r.status == "captured" for r in results) and len(results) == 80
    enqueued = sum(r.enqueued for r in results)
    depth = sum(redis.Redis.from_url(redis_url).llen(f"memhoncho.deliver.{i}") for i in range(8))
    assert depth == enqueued  # every publish that said "enqueued" reached the broker
    assert host._in_flight == 0 and host._app is None
    assert _clients(redis_url) <= idle  # the host's broker connections are closed
    assert host.capture(_run("c-late", "r1")).enqueued is False  # durable, no hint after close


def test_close_returns_by_its_deadline_when_a_publish_hangs(
    config_dir: Path, data_dir: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(config_dir, redis_url)
    host = Host(config_dir, data_dir)
    release = threading.Event()
    entered = threading.Event()

    def hanging_send(*_: Any, **__: Any) -> None:
        entered.set()
        release.wait(JOIN_S)

    monkeypatch.setattr(host.celery(), "send_task", hanging_send)
    capturing = threading.Thread(target=host.capture, args=(_run("c-1", "r1"),))
    capturing.start()
    assert entered.wait(JOIN_S)
    closing = threading.Thread(target=host.close, kwargs={"timeout": DEADLINE_S})
    closing.start()
    closing.join(JOIN_S)
    assert not closing.is_alive()  # close returned ...
    assert not release.is_set() and capturing.is_alive()  # ... while the publish still hung
    assert host._app is None
    release.set()
    capturing.join(JOIN_S)
    assert host.outbox.read(ids.conversation_key("c-1")).records  # durable all along
