"""A hint that waits behind a backlog is not lost (``store/stranded.py``, ``QUEUED_MAX_S``).

With no worker taking hints, a captured conversation's hint waits in its queue and its mark
grows older than ``hint_marks.STALE_S``. While that queue holds messages the mark is not
presumed lost: the stranded look and the status view leave it alone; once the queue is empty
(the hint really was lost), or past ``QUEUED_MAX_S``, it is stranded. On the embedded broker,
whose queue is a folder the test can read and empty, with the files and with PostgreSQL.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.status import stranded as status_stranded
from memhoncho.status.view import status_view
from memhoncho.store import hint_marks, stranded
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.runs import run_event
from memhoncho.worker import queue_depths, routing

KEY = "sk-stranded-backlog-key"
OWNER = "ana@example.com"
#: seconds a file's mtime may lag ``time.time()``: the kernel stamps files from a coarse clock
COARSE_CLOCK_S = 0.02
pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(standin_settings: SettingsWriter, store_url: str | None) -> dict[str, Any]:
    """The stand-in's settings on each store (the plugin's ``deployment`` is built on them)."""
    return standin_settings(store_url=store_url)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each question put to the broker (``queue_depths.read``): the queues it named."""
    questions: list[list[str]] = []
    real_read = queue_depths.read

    def counted(d: Deployment, c: Any, names: list[str]) -> dict[str, int]:
        questions.append(names)
        return real_read(d, c, names)

    monkeypatch.setattr(queue_depths, "read", counted)
    return questions


def _queued(deployment: Deployment, conversation_id: str) -> str:
    """One capture whose hint is published into the embedded broker and waits there."""
    with Host(deployment.config_dir, deployment.data_dir) as host:
        host.capture(run_event(conversation_id, 0, OWNER))
    return ids.conversation_key(conversation_id)


def _depth(deployment: Deployment, conversation_id: str) -> int:
    current = deployment.settings()
    queue = routing.deliver_queue(conversation_id, current.partitions)
    return queue_depths.read(deployment, current, [queue])[queue]


def _empty_queues(deployment: Deployment) -> None:
    """What a flushed broker leaves: every hint gone, the marks still there."""
    for message in (deployment.layout.broker_dir / "queue").glob("*.msg"):
        message.unlink()


def test_an_old_mark_whose_queue_holds_messages_is_not_stranded(deployment: Deployment) -> None:
    key = _queued(deployment, "conv-queued")
    store, current = deployment.store(), deployment.settings()
    assert _depth(deployment, "conv-queued") == 1
    past_stale = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    busy = queue_depths.BusyQueues(deployment, current)

    assert stranded.find(store, current, now=past_stale, in_busy_queue=busy) == []
    assert [s.key for s in stranded.find(store, current, now=past_stale)] == [key]
    bucket = status_stranded.bucket(deployment, current, now=past_stale)
    assert bucket["count"] == 0, bucket

    past_queued_max = time.time() + stranded.QUEUED_MAX_S + stranded.SETTLE_S + 1
    busy = queue_depths.BusyQueues(deployment, current)
    found = stranded.find(store, current, now=past_queued_max, in_busy_queue=busy)
    assert [s.key for s in found] == [key]


def test_an_old_mark_whose_queue_is_empty_is_stranded(deployment: Deployment) -> None:
    key = _queued(deployment, "conv-lost")
    _empty_queues(deployment)
    current = deployment.settings()
    assert _depth(deployment, "conv-lost") == 0
    past_stale = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    busy = queue_depths.BusyQueues(deployment, current)
    found = stranded.find(deployment.store(), current, now=past_stale, in_busy_queue=busy)
    assert [(s.key, s.conversation_id) for s in found] == [(key, "conv-lost")]
    assert status_stranded.bucket(deployment, current, now=past_stale)["count"] == 1


def test_the_broker_is_asked_once_a_look_and_not_at_all_without_an_old_mark(
    deployment: Deployment, asked: list[list[str]]
) -> None:
    for n in range(3):
        _queued(deployment, f"conv-{n}")
    store, current = deployment.store(), deployment.settings()
    stranded.find(store, current, in_busy_queue=queue_depths.BusyQueues(deployment, current))
    assert asked == []  # every mark is fresh: no question
    past_stale = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    busy = queue_depths.BusyQueues(deployment, current)
    assert stranded.find(store, current, now=past_stale, in_busy_queue=busy) == []
    assert len(asked) == 1


def test_a_broker_that_cannot_tell_leaves_the_old_rule(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _queued(deployment, "conv-unknown")

    def down(*_: object) -> dict[str, int]:
        raise ConnectionError("broker down")

    monkeypatch.setattr(queue_depths, "read", down)
    current = deployment.settings()
    past_stale = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    busy = queue_depths.BusyQueues(deployment, current)
    found = stranded.find(deployment.store(), current, now=past_stale, in_busy_queue=busy)
    assert [s.key for s in found] == [key]


def test_renew_moves_a_waiting_mark_and_never_makes_one(deployment: Deployment) -> None:
    key = _queued(deployment, "conv-renewed")
    store, current = deployment.store(), deployment.settings()
    _empty_queues(deployment)  # the hint left the queue: a worker received it
    later = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    (before,) = stranded.find(store, current, now=later)
    time.sleep(0.1)
    renewed_at = time.time() - COARSE_CLOCK_S
    store.renew_hint(key)
    far = time.time() + stranded.QUEUED_MAX_S
    (after,) = stranded.find(store, current, now=far)
    assert before.bound_at < renewed_at + hint_marks.STALE_S <= after.bound_at

    store.take_hint(key)  # its delivery started
    store.renew_hint(key)  # a late renew makes no mark
    assert store.claim_hint(key)  # no hint waits: a capture publishes


def _age_mark(deployment: Deployment, key: str, seconds: float) -> None:
    """Date the conversation's hint mark ``seconds`` earlier, wherever the store keeps it."""
    store: Any = deployment.store()
    if store.kind == "postgresql":  # the conversation's hint_at column
        with store.connection() as conn:
            conn.execute(
                "UPDATE memhoncho_conversations SET hint_at = hint_at - %s WHERE key = %s",
                (seconds, key),
            )
        return
    path = hint_marks.mark_path(deployment.layout, key)
    then = path.stat().st_mtime - seconds
    os.utime(path, (then, then))


def _wait_past_bound(deployment: Deployment, key: str) -> None:
    """Until the conversation is stranded by the rule without a queue's depth: its capture
    ``stranded.SETTLE_S`` behind (a look every 0.05 s)."""
    store, current = deployment.store(), deployment.settings()
    deadline = time.monotonic() + stranded.SETTLE_S + 10
    while [s.key for s in stranded.find(store, current)] != [key]:
        assert time.monotonic() < deadline, "never past its bound"
        time.sleep(0.05)


def test_the_status_view_asks_the_broker_once_for_the_queues_and_the_stranded_look(
    deployment: Deployment, asked: list[list[str]]
) -> None:
    key = _queued(deployment, "conv-viewed")
    _age_mark(deployment, key, hint_marks.STALE_S + stranded.SETTLE_S + 5)
    _wait_past_bound(deployment, key)
    view = status_view(deployment)
    assert view["queues"]["total"] == 1
    assert view["stranded"]["count"] == 0, view["stranded"]  # its hint waits in the queue
    assert len(asked) == 1

    _empty_queues(deployment)  # the hint is lost: now it is stranded
    assert status_view(deployment)["stranded"]["count"] == 1


def _received(deployment: Deployment, conversation_id: str, **fields: Any) -> None:
    """What the worker's main process does as a message arrives (``task_received``)."""
    from types import SimpleNamespace

    from memhoncho.worker import tasks

    conf = SimpleNamespace(
        memhoncho_config_dir=str(deployment.config_dir),
        memhoncho_data_dir=str(deployment.data_dir),
    )
    request = SimpleNamespace(
        name=routing.DELIVER_TASK, eta=None, args=[conversation_id], app=SimpleNamespace(conf=conf)
    )
    for name, value in fields.items():
        setattr(request, name, value)
    tasks._hint_received(request=request)


def test_a_received_hint_renews_its_mark_off_the_consumers_thread(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _queued(deployment, "conv-received")
    store, current = deployment.store(), deployment.settings()
    later = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    (before,) = stranded.find(store, current, now=later)

    renewed: list[str] = []
    release, done = threading.Event(), threading.Event()
    real_renew = type(store).renew_hint

    def held_renew(self: Any, key: str) -> None:  # a database slow to answer
        release.wait(30)
        real_renew(self, key)
        renewed.append(key)
        done.set()

    monkeypatch.setattr(type(store), "renew_hint", held_renew)
    _received(deployment, "conv-retried", eta="2026-12-06T00:00:00")  # a retry: left alone
    _received(deployment, "conv-recalled", name="memhoncho.recall")  # not a hint
    started = time.monotonic()
    _received(deployment, "conv-received")
    assert time.monotonic() - started < 1.0  # the consumer's loop did not wait for it
    release.set()
    assert done.wait(10)
    assert renewed == [key]  # the first renewal (one thread, in order): none for the others
    (after,) = stranded.find(store, current, now=time.time() + stranded.QUEUED_MAX_S)
    assert after.bound_at > before.bound_at


def test_a_hint_received_while_a_look_runs_is_not_stranded(deployment: Deployment) -> None:
    """The look reads the marks, then asks the broker: a hint a worker took in between has
    left its queue (empty now) and renewed its mark, which the look reads again."""
    key = _queued(deployment, "conv-taken")
    _empty_queues(deployment)
    _age_mark(deployment, key, hint_marks.STALE_S + stranded.SETTLE_S + 5)
    _wait_past_bound(deployment, key)
    store, current = deployment.store(), deployment.settings()

    def lost(conversation_id: str) -> bool:
        return False  # its queue is empty, and nobody took the hint

    def received_meanwhile(conversation_id: str) -> bool:
        store.renew_hint(key)  # as the worker's task_received does
        return False

    assert [s.key for s in stranded.find(store, current, in_busy_queue=lost)] == [key]
    assert stranded.find(store, current, in_busy_queue=received_meanwhile) == []


#: seconds after the broker's answer that the receipt renews the mark (CI saw 20 ms)
RENEWED_AFTER_S = 0.075


def test_a_hint_whose_receipt_renews_its_mark_just_after_the_look_is_not_stranded(
    deployment: Deployment,
) -> None:
    """The hint left its queue (the broker says empty) and the worker's receipt renews its mark
    a moment later, on the worker's renewal thread: the look looks again before it decides.
    Seen on CI (2026-12-07): a draining backlog's conversation counted stranded for one look."""
    key = _queued(deployment, "conv-arriving")
    _empty_queues(deployment)
    _age_mark(deployment, key, hint_marks.STALE_S + stranded.SETTLE_S + 5)
    _wait_past_bound(deployment, key)
    store, current = deployment.store(), deployment.settings()
    renewals: list[threading.Timer] = []

    def received_just_after(conversation_id: str) -> bool:
        renewal = threading.Timer(RENEWED_AFTER_S, store.renew_hint, [key])
        renewal.start()  # as the worker's receipt does, once the message reached it
        renewals.append(renewal)
        return False

    assert stranded.find(store, current, in_busy_queue=received_just_after) == []
    assert len(renewals) == 1


def test_a_broker_that_is_down_is_asked_once_by_a_status_read(
    deployment: Deployment, asked: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queues bucket waits out the broker's timeout; the stranded look does not again."""
    key = _queued(deployment, "conv-down")
    _age_mark(deployment, key, hint_marks.STALE_S + stranded.SETTLE_S + 5)
    _wait_past_bound(deployment, key)
    counted = queue_depths.read

    def down(d: Deployment, c: Any, names: list[str]) -> dict[str, int]:
        counted(d, c, names)  # recorded in ``asked``
        raise ConnectionError("broker down")

    monkeypatch.setattr(queue_depths, "read", down)
    view = status_view(deployment)
    assert view["queues"]["depths"] is None
    assert view["stranded"]["count"] == 1  # unknown depths: the 10 s rule, as before
    assert len(asked) == 1
