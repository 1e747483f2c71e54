"""The results store: both backends, the error summary, and the signal wiring."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from memhoncho import results
from memhoncho.errors import HonchoUnavailable
from memhoncho.results import ErrorSummary, ResultsStore
from memhoncho.results.file_store import FileResults
from memhoncho.results.redis_store import RedisResults
from memhoncho.results.signals import Recorder
from memhoncho.worker.routing import TASK_PREFIX

SECRET_TEXT = "my knee hurts sk-live-SECRET"


@pytest.fixture(params=["redis", "file", "postgresql"])
def store(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[ResultsStore]:
    if request.param == "redis":
        yield RedisResults(fakeredis.FakeRedis(decode_responses=True))
    elif request.param == "postgresql":
        from memhoncho.results.postgres_store import PostgresResults

        yield PostgresResults(request.getfixturevalue("postgres_url"), data_dir)
    else:
        yield FileResults(data_dir)


def test_a_success_after_failures_resets_the_run_of_failures_and_keeps_the_counts(
    store: ResultsStore,
) -> None:
    store.record_start("memhoncho.deliver", 100.0)
    store.record_failure(
        "memhoncho.deliver", 101.0, ErrorSummary.of(HonchoUnavailable()), retry=True
    )
    store.record_start("memhoncho.deliver", 102.0)
    store.record_failure("memhoncho.deliver", 103.0, ErrorSummary.of(ValueError("x")), retry=False)
    found = store.all()["memhoncho.deliver"]
    assert found.consecutive_failures == 2
    assert (found.started, found.retried, found.failed, found.succeeded) == (2, 1, 1, 0)
    assert found.last_error_type == "ValueError" and found.last_error_at == 103.0
    store.record_start("memhoncho.deliver", 104.0)
    store.record_success("memhoncho.deliver", 105.0)
    found = store.all()["memhoncho.deliver"]
    assert found.consecutive_failures == 0
    assert found.last_success_at == 105.0 and found.last_start_at == 104.0
    assert (found.started, found.succeeded, found.failed) == (3, 1, 1)
    assert found.last_error_type == "ValueError"  # the last error stays visible


def test_a_memhoncho_error_is_kept_as_code_and_message(store: ResultsStore) -> None:
    error = ErrorSummary.of(HonchoUnavailable())
    store.record_failure("memhoncho.deliver", 1.0, error, retry=True)
    found = store.all()["memhoncho.deliver"]
    assert found.last_error_code == "ERR_HONCHO_UNAVAILABLE"
    assert found.last_error_message == HonchoUnavailable().message


def test_any_other_error_is_kept_as_its_type_name_only() -> None:
    summary = ErrorSummary.of(RuntimeError(SECRET_TEXT))
    assert summary == ErrorSummary("RuntimeError", None, None)


def test_tasks_are_kept_apart_by_name(store: ResultsStore) -> None:
    store.record_start("memhoncho.deliver", 1.0)
    store.record_start("memhoncho.outbox_sweep", 2.0)
    store.record_success("memhoncho.outbox_sweep", 3.0)
    found = store.all()
    assert sorted(found) == ["memhoncho.deliver", "memhoncho.outbox_sweep"]
    assert found["memhoncho.deliver"].succeeded == 0


def test_beat_heartbeats_go_stale_and_a_gone_beat_leaves(store: ResultsStore) -> None:
    now = time.time()
    store.beat_heartbeat("host:1", now)
    store.beat_heartbeat("host:2", now)
    assert sorted(store.live_beats(now)) == ["host:1", "host:2"]
    store.beat_gone("host:2")
    assert sorted(store.live_beats(now)) == ["host:1"]
    assert store.live_beats(now + results.BEAT_STALE_S + 1) == {}


def test_the_redis_backend_keeps_one_hash_per_task_under_the_prefix() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    RedisResults(client).record_start("memhoncho.deliver", 5.0)
    assert client.hgetall("memhoncho:results:memhoncho.deliver") == {
        "last_start_at": "5.0",
        "started": "1",
    }


def test_the_file_backend_survives_a_corrupt_file_by_starting_afresh(data_dir: Path) -> None:
    store = FileResults(data_dir)
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    store.record_start("memhoncho.deliver", 1.0)
    assert json.loads(store.path.read_text())["tasks"]["memhoncho.deliver"]["started"] == 1


def test_the_store_is_redis_only_for_a_redis_broker(data_dir: Path) -> None:
    assert isinstance(results.store_for(None, data_dir), FileResults)
    assert isinstance(results.store_for("filesystem://", data_dir), FileResults)
    assert isinstance(results.store_for("redis://127.0.0.1:6379/13", data_dir), RedisResults)
    from memhoncho.results.postgres_store import PostgresResults

    on_postgres = results.store_for("redis://127.0.0.1:6379/13", data_dir, "postgresql://h/db")
    assert isinstance(on_postgres, PostgresResults)  # the store of many machines holds them


class _Task:
    def __init__(self, name: str) -> None:
        self.name = name


class _App:
    def __init__(self, data_dir: Path) -> None:
        self.conf = type("Conf", (), {"broker_url": None, "memhoncho_data_dir": str(data_dir)})()


def test_the_signal_handlers_record_only_memhoncho_tasks_and_never_raise(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(_App(data_dir), TASK_PREFIX)
    recorder.prerun(sender=_Task("memhoncho.deliver"))
    recorder.retry(sender=_Task("memhoncho.deliver"), reason=HonchoUnavailable())
    recorder.failure(sender=_Task("memhoncho.deliver"), exception=RuntimeError(SECRET_TEXT))
    recorder.prerun(sender=_Task("celery.accumulate"))
    stored = FileResults(data_dir).path.read_text()
    assert "celery.accumulate" not in stored and "SECRET" not in stored and "knee" not in stored
    found = FileResults(data_dir).all()["memhoncho.deliver"]
    assert (found.retried, found.failed, found.consecutive_failures) == (1, 1, 2)

    def broken(*_: Any, **__: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(FileResults, "record_success", broken)
    recorder.success(sender=_Task("memhoncho.deliver"))  # logged, not raised


def test_the_celery_app_connects_the_recorder(data_dir: Path) -> None:
    """``data_dir`` is the environment's (``MEMHONCHO_DATA_DIR``), initialised: the process's
    app refuses a folder that is not."""
    from celery import signals

    from memhoncho.celery_app import app

    assert isinstance(app.memhoncho_results, Recorder)
    receivers = [r[0][0] for r in signals.task_prerun.receivers]
    assert "memhoncho.results.prerun" in receivers


class _Request:
    pass


class _BoundTask(_Task):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.request = _Request()


def test_a_retry_is_blamed_on_the_error_being_handled_and_lock_contention_is_not_a_failure(
    data_dir: Path,
) -> None:
    from celery.exceptions import Retry

    from memhoncho.errors import ForkWaiting

    recorder = Recorder(_App(data_dir), TASK_PREFIX)
    task = _Task("memhoncho.deliver")
    try:
        try:
            raise HonchoUnavailable()
        except HonchoUnavailable:
            raise Retry("Task can be retried", None) from None
    except Retry as retry:
        recorder.retry(sender=task, reason=retry)
    recorder.retry(sender=task, reason=Retry("Task can be retried", ForkWaiting()))
    found = FileResults(data_dir).all()["memhoncho.deliver"]
    assert found.last_error_code == "ERR_HONCHO_UNAVAILABLE"
    assert (found.retried, found.consecutive_failures) == (2, 1)


def test_a_task_that_gave_up_is_recorded_as_a_failure_not_a_success(data_dir: Path) -> None:
    from memhoncho.errors import MissingApiKey

    recorder = Recorder(_App(data_dir), TASK_PREFIX)
    task = _BoundTask("memhoncho.deliver")
    results.gave_up(task, MissingApiKey())
    recorder.success(sender=task)
    found = FileResults(data_dir).all()["memhoncho.deliver"]
    assert (found.succeeded, found.failed, found.consecutive_failures) == (0, 1, 1)
    assert found.last_error_code == "ERR_NO_API_KEY"
    recorder.success(sender=_BoundTask("memhoncho.deliver"))
    assert FileResults(data_dir).all()["memhoncho.deliver"].consecutive_failures == 0
