"""host.close(timeout): in-flight enqueues finish, resources are released, the deadline holds."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.testing.config import write_api_key
from memhoncho.worker.routing import partition

DEADLINE_S = 0.3  # the close deadline under test
TCP_ESTABLISHED = "01"  # state column of /proc/net/tcp
SLOW_PUBLISH_S = 0.2  # seconds each publish takes in the first test
JOIN_S = 30.0  # generous: only a hang fails


PARTITIONS = 256  # captures go to partitions >= 8, which no worker of a concurrent test reads


def _configure(config_dir: Path, broker_url: str) -> None:
    settings = {"broker_url": broker_url, "partitions": PARTITIONS}
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(settings))
    write_api_key(config_dir, "k")


def _run(conversation: str, run: str) -> dict[str, Any]:
    return {
        "conversation_id": conversation,
        "owner": None,
        "run_id": run,
        "inputs": [{"entry_id": 1, "text": "hello"}],
        "outcome": {"status": "unanswered"},
    }


def _redis_sockets(redis_url: str) -> set[str]:
    """Open TCP sockets of this process to the tests' Redis, as socket inodes (from /proc: fds
    matched to net/tcp), by its port: a private server's, or 6379 for a claimed database.

    Sets, not counts: connections other tests of this process left open may be closed by the
    garbage collector in the middle of this one (a count of 19 at idle fell to 8 in CI)."""
    redis_port = urlsplit(redis_url).port or 6379
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == redis_port and fields[3] == TCP_ESTABLISHED and fields[9] in inodes:
                found.add(fields[9])
    return found


def test_close_waits_for_in_flight_enqueues_and_releases_the_broker_connections(
    config_dir: Path, data_dir: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(config_dir, redis_url)
    idle = _redis_sockets(redis_url)
    host = Host(config_dir, data_dir)
    publisher = host._sender.client()[1]
    real_publish = publisher.publish
    publishing = threading.Event()
    open_sockets: list[set[str]] = []

    def slow_publish(conversation_id: str) -> None:
        publishing.set()
        time.sleep(SLOW_PUBLISH_S)  # a slow broker: close must wait for this publish
        real_publish(conversation_id)
        open_sockets.append(_redis_sockets(redis_url))

    monkeypatch.setattr(publisher, "publish", slow_publish)
    conversations = [c for c in (f"c-{n}" for n in range(100)) if partition(c, PARTITIONS) >= 8]
    results: list[Any] = []

    def capture(conversation: str) -> None:
        for i in range(5):
            results.append(host.capture(_run(conversation, f"r{i}")))

    threads = [threading.Thread(target=capture, args=(c,)) for c in conversations[:4]]
    for thread in threads:
        thread.start()
    assert publishing.wait(JOIN_S)
    host.close(timeout=25)
    assert host._sender._in_flight == 0 and host._sender._app is None
    for thread in threads:
        thread.join(JOIN_S)
        assert not thread.is_alive()
    assert all(r.status == "captured" for r in results) and len(results) == 20
    enqueued = sum(r.enqueued for r in results)
    assert enqueued >= 1  # the publishes in flight at close finished ...
    client = redis.Redis.from_url(redis_url)
    queues = {f"memhoncho.deliver.{partition(c, PARTITIONS)}" for c in conversations[:4]}
    assert sum(client.llen(queue) for queue in queues) == enqueued  # ... and reached the broker
    client.close()
    opened = set().union(*open_sockets) - idle
    assert opened  # the look sees the host's connections ...
    assert not opened & _redis_sockets(redis_url)  # ... and after close they are gone
    assert host.capture(_run("c-late", "r1")).enqueued is False  # durable, no hint after close


def test_close_returns_by_its_deadline_when_a_publish_hangs(
    config_dir: Path, data_dir: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _configure(config_dir, redis_url)
    host = Host(config_dir, data_dir)
    release = threading.Event()
    entered = threading.Event()

    def hanging_publish(_: str) -> None:
        entered.set()
        release.wait(JOIN_S)

    monkeypatch.setattr(host._sender.client()[1], "publish", hanging_publish)
    capturing = threading.Thread(target=host.capture, args=(_run("c-1", "r1"),))
    capturing.start()
    assert entered.wait(JOIN_S)
    closing = threading.Thread(target=host.close, kwargs={"timeout": DEADLINE_S})
    closing.start()
    closing.join(JOIN_S)
    assert not closing.is_alive()  # close returned ...
    assert not release.is_set() and capturing.is_alive()  # ... while the publish still hung
    assert host._sender._app is None
    release.set()
    capturing.join(JOIN_S)
    assert host.deployment.store().records(ids.conversation_key("c-1"))  # durable all along
