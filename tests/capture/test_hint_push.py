"""On Redis, a capture's hint after the first is pushed (``capture/hint_push.py``): its LPUSH
written on a kept connection before the fsync and the reply read after. Each such hint reaches
the queue once; a connection the broker closed, a failed fsync and a fork cost no hint and
leave nothing in flight."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from host_capture_support import SECRET, run_event

from memhoncho import Host, ids
from memhoncho.capture import hint_push
from memhoncho.errors import MemhonchoError
from memhoncho.store import hint_marks
from memhoncho.worker import routing

CONVERSATION = "c-42"
QUEUE = routing.deliver_queue(CONVERSATION, 8)


@pytest.fixture
def host(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> Iterator[Host]:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        yield host


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _recording(seen: list[bool]) -> Any:
    """``Pushers.push`` that notes whether each hint begun was pushed (True) or left to a hint
    thread (False)."""
    push = hint_push.Pushers.push

    def recording(self: hint_push.Pushers, queue: Any, message: str) -> Any:
        pushed = push(self, queue, message)
        seen.append(pushed is not None)
        return pushed

    return recording


@pytest.fixture
def pushes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    seen: list[bool] = []
    monkeypatch.setattr(hint_push.Pushers, "push", _recording(seen))
    return seen


def _capture_after_a_take(host: Host, run_id: str) -> Any:
    """A capture that must publish: as when a delivery just took the conversation's hint."""
    hint_marks.taken(host.deployment.layout, ids.conversation_key(CONVERSATION))
    return host.capture(run_event(run_id, CONVERSATION))


def _hints(broker: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in broker.lrange(QUEUE, 0, -1)]


def test_after_the_first_hint_each_hint_is_pushed_and_reaches_the_queue_once(
    host: Host, broker: redis.Redis, pushes: list[bool]
) -> None:
    results = [_capture_after_a_take(host, f"r-{i}") for i in range(5)]
    assert [r.enqueued for r in results] == [True] * 5
    assert [r.hint for r in results] == ["published"] * 5
    assert pushes == [True] * 4  # the first hint went through kombu, which made the connection
    hints = _hints(broker)
    assert len(hints) == 5 and len({h["headers"]["id"] for h in hints}) == 5
    assert host.hints_published == 5


def test_a_push_on_a_connection_the_broker_closed_is_published_anew_once(
    host: Host, broker: redis.Redis, pushes: list[bool]
) -> None:
    assert _capture_after_a_take(host, "r-1").enqueued
    broker.client_kill_filter(_type="normal", skipme=True)  # the host's connections, all
    result = _capture_after_a_take(host, "r-2")
    assert result.enqueued is True and result.hint == "published"
    assert pushes == [True]  # written on the dead connection: its reply failed, kombu sent it
    assert len(_hints(broker)) == 2
    assert _capture_after_a_take(host, "r-3").enqueued  # and the next is pushed again
    assert pushes == [True, True] and len(_hints(broker)) == 3


def test_a_capture_whose_fsync_fails_after_its_push_ends_the_push(
    host: Host, broker: redis.Redis, pushes: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _capture_after_a_take(host, "r-1").enqueued

    def full_disk(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with monkeypatch.context() as patched, pytest.raises((OSError, MemhonchoError)):
        patched.setattr(os, "fsync", full_disk)
        _capture_after_a_take(host, "r-2")
    assert pushes == [True]
    sender = host._sender
    assert sender._in_flight == 0  # nothing for close() to wait on
    assert _capture_after_a_take(host, "r-3").enqueued  # the connection came back
    assert pushes == [True, True]


def _capture_in_child(host: Host, answers: Any) -> None:
    pushed: list[bool] = []
    hint_push.Pushers.push = _recording(pushed)  # type: ignore[method-assign]
    result = _capture_after_a_take(host, "r-child")
    answers.put((result.enqueued, result.hint, pushed))


def test_a_forked_child_pushes_on_no_connection_of_its_parent(
    host: Host, broker: redis.Redis, pushes: list[bool]
) -> None:
    assert _capture_after_a_take(host, "r-1").enqueued  # the parent keeps a connection now
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_capture_in_child, args=(host, answers), daemon=True)
    child.start()
    child.join(timeout=60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0
    # through kombu, on its own connection: none of the parent's is idle in the child
    assert answers.get(timeout=5) == (True, "published", [])
    answers.close()
    answers.join_thread()
    assert _capture_after_a_take(host, "r-2").enqueued  # the parent's socket is still its own
    assert pushes == [True] and len(_hints(broker)) == 3
