"""Hints coalesce: a conversation whose hint still waits is not hinted again (store/hint_marks.py).

The marks alone, then the host on a real Redis with no worker: the queue holds one hint however
many captures are made, until a delivery takes the mark or the mark goes stale.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.store import hint_marks
from memhoncho.store.layout import Layout
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.ports import free_port
from memhoncho.testing.runs import run_event
from memhoncho.worker import routing


def test_the_first_claim_publishes_and_the_next_ones_coalesce(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert hint_marks.claim(layout, "c1") is True
    assert hint_marks.claim(layout, "c1") is False
    assert hint_marks.claim(layout, "c2") is True  # marks are per conversation


def test_a_taken_mark_makes_the_next_capture_publish_again(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert hint_marks.claim(layout, "c1")
    hint_marks.taken(layout, "c1")
    assert hint_marks.claim(layout, "c1") is True
    hint_marks.taken(layout, "gone")  # no mark: nothing to do, no error


def test_a_released_mark_after_a_failed_publish_lets_the_next_capture_publish(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    assert hint_marks.claim(layout, "c1")
    hint_marks.release(layout, "c1")
    assert hint_marks.claim(layout, "c1") is True


def test_a_stale_mark_is_renewed_and_published_again_once(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert hint_marks.claim(layout, "c1")
    old = time.time() - hint_marks.STALE_S - 1
    os.utime(hint_marks.mark_path(layout, "c1"), (old, old))
    assert hint_marks.stale(layout) == ["c1"]
    assert hint_marks.claim(layout, "c1") is True  # presumed lost: publish again
    assert hint_marks.claim(layout, "c1") is False  # renewed: the new hint waits
    assert hint_marks.stale(layout) == []


def test_a_mark_claimed_for_a_later_retry_is_dated_then_and_renewal_keeps_the_date(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    now = time.time()
    assert hint_marks.claim(layout, "c1", now=now, due_in_s=600.0)
    path = hint_marks.mark_path(layout, "c1")
    assert os.stat(path).st_mtime == pytest.approx(now + 600.0, abs=1)
    hint_marks.renew(layout, "c1")  # a worker received the retry long before it is due
    assert os.stat(path).st_mtime == pytest.approx(now + 600.0, abs=1)
    later = now + 600.0 + hint_marks.STALE_S
    assert hint_marks.claim(layout, "c1", now=later - 1) is False  # due soon: it waits
    assert hint_marks.claim(layout, "c1", now=later + 1) is True  # past due and stale: lost


KEY = "sk-hint-marks"
PARTITIONS = 8  # the settings' default


@pytest.fixture
def host(config_dir: Path, data_dir: Path, redis_url: str) -> Iterator[Host]:
    write_settings(config_dir, broker_url=redis_url, base_url="http://127.0.0.1:9")
    write_api_key(config_dir, KEY)
    with Host(config_dir, data_dir) as running:
        yield running


def _queued(redis_url: str, conversation_id: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen(routing.deliver_queue(conversation_id, PARTITIONS)))
    finally:
        client.close()


def test_fifty_captures_of_a_waiting_conversation_publish_one_hint(
    host: Host, redis_url: str
) -> None:
    results = [host.capture(run_event("conv-a", i)) for i in range(50)]
    assert all(r.enqueued for r in results)  # each line is covered by the waiting hint
    assert _queued(redis_url, "conv-a") == 1
    host.capture(run_event("conv-b", 0))
    assert _queued(redis_url, "conv-b") == 1


def test_a_delivery_that_starts_takes_the_mark_and_the_next_capture_hints_again(
    host: Host, redis_url: str, config_dir: Path, data_dir: Path
) -> None:
    host.capture(run_event("conv-a", 0))
    key = ids.conversation_key("conv-a")
    deployment = Deployment(config_dir, data_dir)
    assert hint_marks.mark_path(deployment.layout, key).exists()
    with pytest.raises(Exception):  # noqa: B017  (nothing answers at base_url; the mark goes)
        deliver_conversation(deployment, "conv-a")
    assert not hint_marks.mark_path(deployment.layout, key).exists()
    host.capture(run_event("conv-a", 1))
    assert _queued(redis_url, "conv-a") == 2


def test_a_failed_publish_leaves_no_mark_so_nothing_waits_on_a_hint_that_is_not_there(
    config_dir: Path, data_dir: Path
) -> None:
    closed = free_port()
    write_settings(config_dir, broker_url=f"redis://127.0.0.1:{closed}/0")
    write_api_key(config_dir, KEY)
    with Host(config_dir, data_dir) as host:
        result = host.capture(run_event("conv-a", 0))
    assert result.status == "captured" and result.enqueued is False
    layout = Deployment(config_dir, data_dir).layout
    assert not hint_marks.mark_path(layout, ids.conversation_key("conv-a")).exists()
