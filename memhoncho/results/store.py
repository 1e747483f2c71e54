"""Task bookkeeping: every memhoncho task's last start, success and error, and its counts.

Celery's task signals feed one ``ResultsStore``: a Redis hash per task name
(``memhoncho:results:<task>``) when the broker is Redis, else a small JSON file under the data
directory (embedded broker, one machine). Beat processes also write a heartbeat, so ``doctor``
can tell "no beat" and "two beats" apart, and so do workers, with the queues they consume, so
the status view can tell a queue nobody consumes without asking the workers. ``connect(app)``
wires it; nothing happens at import.

An error is recorded as its ``MemhonchoError`` code and message (which never carry a key or
content) or, for anything else, only its type name.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from memhoncho.errors import LockBusy, MemhonchoError
from memhoncho.store.atomic import write_json
from memhoncho.store.locks import file_lock

log = logging.getLogger(__name__)

KEY_PREFIX = "memhoncho:results:"
BEAT_KEY_PREFIX = "memhoncho:beat:"
WORKER_KEY_PREFIX = "memhoncho:worker:"
TASK_PREFIX = "memhoncho."  # only memhoncho's own tasks are recorded
BEAT_HEARTBEAT_S = 15.0  # seconds between a beat's heartbeats
BEAT_STALE_S = 60.0  # a heartbeat older than this is a beat that is gone
REDIS_TIMEOUT_S = 1.0  # seconds; bookkeeping never holds a task up for long
MAX_MESSAGE_CHARS = 300  # of an error message kept
RESULTS_FILE = Path("state") / "results.json"
RESULTS_LOCK = Path("state") / "locks" / "results.lock"
GAVE_UP_ATTR = "memhoncho_gave_up"  # set on a task's request by ``gave_up``


@dataclass
class TaskResult:
    """What one task name has done. Times are Unix seconds; None means never."""

    name: str
    last_start_at: float | None = None
    last_success_at: float | None = None
    last_error_at: float | None = None
    last_error_type: str | None = None
    last_error_code: str | None = None
    last_error_message: str | None = None
    consecutive_failures: int = 0  #: failures and retries since the last success
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_fields(cls, name: str, raw: dict[str, Any]) -> TaskResult:
        """From stored strings or values; unknown or unparsable fields are ignored."""
        result = cls(name=name)
        for spec in fields(cls):
            if spec.name == "name" or spec.name not in raw or raw[spec.name] in (None, ""):
                continue
            value = raw[spec.name]
            try:
                if spec.name.endswith("_at"):
                    setattr(result, spec.name, float(value))
                elif spec.type in ("int", int):
                    setattr(result, spec.name, int(value))
                else:
                    setattr(result, spec.name, str(value))
            except (TypeError, ValueError):
                continue
        return result


@dataclass(frozen=True)
class ErrorSummary:
    """An error as it may be shown to an operator: no secret, no content."""

    type: str
    code: str | None
    message: str | None

    @classmethod
    def of(cls, exc: BaseException | object) -> ErrorSummary:
        if isinstance(exc, MemhonchoError):
            return cls(type(exc).__name__, exc.code, exc.message[:MAX_MESSAGE_CHARS])
        return cls(type(exc).__name__, None, None)


class ResultsStore(Protocol):
    """Where task results and beat heartbeats live."""

    def record_start(self, name: str, at: float) -> None: ...
    def record_success(self, name: str, at: float) -> None: ...
    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None: ...
    def record_retry(self, name: str) -> None: ...
    def all(self) -> dict[str, TaskResult]: ...
    def beat_heartbeat(self, beat_id: str, at: float) -> None: ...
    def beat_gone(self, beat_id: str) -> None: ...
    def live_beats(self, now: float) -> dict[str, float]: ...
    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None: ...
    def worker_gone(self, worker_id: str) -> None: ...
    def live_workers(self, now: float) -> dict[str, list[str]]: ...


def _error_fields(at: float, error: ErrorSummary) -> dict[str, Any]:
    return {
        "last_error_at": at,
        "last_error_type": error.type,
        "last_error_code": error.code or "",
        "last_error_message": error.message or "",
    }


class RedisResults:
    """A hash per task name; counters with HINCRBY, so concurrent workers never lose a count."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> RedisResults:
        import redis

        return cls(
            redis.Redis.from_url(
                url,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
                decode_responses=True,
            )
        )

    def record_start(self, name: str, at: float) -> None:
        pipe = self.client.pipeline()
        pipe.hset(KEY_PREFIX + name, "last_start_at", at)
        pipe.hincrby(KEY_PREFIX + name, "started", 1)
        pipe.execute()

    def record_success(self, name: str, at: float) -> None:
        pipe = self.client.pipeline()
        pipe.hset(KEY_PREFIX + name, mapping={"last_success_at": at, "consecutive_failures": 0})
        pipe.hincrby(KEY_PREFIX + name, "succeeded", 1)
        pipe.execute()

    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None:
        pipe = self.client.pipeline()
        pipe.hset(KEY_PREFIX + name, mapping=_error_fields(at, error))
        pipe.hincrby(KEY_PREFIX + name, "consecutive_failures", 1)
        pipe.hincrby(KEY_PREFIX + name, "retried" if retry else "failed", 1)
        pipe.execute()

    def record_retry(self, name: str) -> None:
        self.client.hincrby(KEY_PREFIX + name, "retried", 1)

    def all(self) -> dict[str, TaskResult]:
        keys = sorted(self.client.scan_iter(match=KEY_PREFIX + "*", count=200))
        if not keys:
            return {}
        pipe = self.client.pipeline()
        for key in keys:
            pipe.hgetall(key)
        found = {}
        for key, raw in zip(keys, pipe.execute(), strict=True):
            name = key[len(KEY_PREFIX) :]
            found[name] = TaskResult.from_fields(name, raw)
        return found

    def beat_heartbeat(self, beat_id: str, at: float) -> None:
        self.client.set(BEAT_KEY_PREFIX + beat_id, at, ex=int(BEAT_STALE_S))

    def beat_gone(self, beat_id: str) -> None:
        self.client.delete(BEAT_KEY_PREFIX + beat_id)

    def live_beats(self, now: float) -> dict[str, float]:
        beats = {}
        for key in self.client.scan_iter(match=BEAT_KEY_PREFIX + "*", count=200):
            value = self.client.get(key)
            if value is not None and now - float(value) <= BEAT_STALE_S:
                beats[key[len(BEAT_KEY_PREFIX) :]] = float(value)
        return beats

    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None:
        value = json.dumps({"at": at, "queues": queues})
        self.client.set(WORKER_KEY_PREFIX + worker_id, value, ex=int(BEAT_STALE_S))

    def worker_gone(self, worker_id: str) -> None:
        self.client.delete(WORKER_KEY_PREFIX + worker_id)

    def live_workers(self, now: float) -> dict[str, list[str]]:
        workers = {}
        for key in self.client.scan_iter(match=WORKER_KEY_PREFIX + "*", count=200):
            raw = self.client.get(key)
            worker = _live_worker(raw and json.loads(raw), now)
            if worker is not None:
                workers[key[len(WORKER_KEY_PREFIX) :]] = worker
        return workers


def _live_worker(value: Any, now: float) -> list[str] | None:
    """The queues of a worker heartbeat that is fresh, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("at"), int | float):
        return None
    if now - float(value["at"]) > BEAT_STALE_S:
        return None
    return [str(q) for q in value.get("queues") or []]


class FileResults:
    """One JSON file (``state/results.json``), read-modified-written under a file lock."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / RESULTS_FILE
        self.lock = data_dir / RESULTS_LOCK

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {"tasks": {}, "beats": {}}
        except ValueError:
            log.warning(
                "results file is corrupt; starting it afresh", extra={"action": "results_reset"}
            )
            return {"tasks": {}, "beats": {}}
        if not isinstance(value, dict):
            return {"tasks": {}, "beats": {}}
        value.setdefault("tasks", {})
        value.setdefault("beats", {})
        return value

    def _update(self, change: Any) -> None:
        with file_lock(self.lock):
            state = self._read()
            change(state)
            write_json(self.path, state)

    def _task(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        task: dict[str, Any] = state["tasks"].setdefault(name, {})
        return task

    def record_start(self, name: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task["last_start_at"] = at
            task["started"] = int(task.get("started", 0)) + 1

        self._update(change)

    def record_success(self, name: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task.update(last_success_at=at, consecutive_failures=0)
            task["succeeded"] = int(task.get("succeeded", 0)) + 1

        self._update(change)

    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None:
        counter = "retried" if retry else "failed"

        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task.update(_error_fields(at, error))
            task["consecutive_failures"] = int(task.get("consecutive_failures", 0)) + 1
            task[counter] = int(task.get(counter, 0)) + 1

        self._update(change)

    def record_retry(self, name: str) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task["retried"] = int(task.get("retried", 0)) + 1

        self._update(change)

    def all(self) -> dict[str, TaskResult]:
        """Raises ValueError when the file is not JSON (the status view says so)."""
        try:
            value = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        tasks = value.get("tasks", {}) if isinstance(value, dict) else {}
        return {name: TaskResult.from_fields(name, raw) for name, raw in sorted(tasks.items())}

    def beat_heartbeat(self, beat_id: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            beats = state["beats"]
            for other in [b for b, seen in beats.items() if at - float(seen) > BEAT_STALE_S]:
                del beats[other]
            beats[beat_id] = at

        self._update(change)

    def beat_gone(self, beat_id: str) -> None:
        self._update(lambda state: state["beats"].pop(beat_id, None))

    def live_beats(self, now: float) -> dict[str, float]:
        beats = self._read()["beats"]
        return {b: float(t) for b, t in beats.items() if now - float(t) <= BEAT_STALE_S}

    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None:
        def change(state: dict[str, Any]) -> None:
            workers = state.setdefault("workers", {})
            for other in [w for w in workers if _live_worker(workers[w], at) is None]:
                del workers[other]
            workers[worker_id] = {"at": at, "queues": queues}

        self._update(change)

    def worker_gone(self, worker_id: str) -> None:
        self._update(lambda state: state.setdefault("workers", {}).pop(worker_id, None))

    def live_workers(self, now: float) -> dict[str, list[str]]:
        found = {}
        for worker_id, value in (self._read().get("workers") or {}).items():
            worker = _live_worker(value, now)
            if worker is not None:
                found[worker_id] = worker
        return found


def is_redis(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("redis://", "rediss://", "unix://"))


def store_for(broker_url: str | None, data_dir: Path) -> ResultsStore:
    """Redis when the broker is Redis, else the file under the data directory."""
    if broker_url and is_redis(broker_url):
        return RedisResults.from_url(broker_url)
    return FileResults(data_dir)


# ---- wiring to Celery ----------------------------------------------------------------------


def gave_up(task: Any, exc: BaseException) -> None:
    """Called by a task that returns normally without doing its job (the work stays pending):
    the results record it as a failure with ``exc``'s code, not as a success."""
    try:
        setattr(task.request, GAVE_UP_ATTR, ErrorSummary.of(exc))
    except Exception:  # bookkeeping never fails a task
        pass


class _Recorder:
    """The signal handlers of one app. The store is built on first use, in the process using it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._store: ResultsStore | None = None
        self._pid = 0
        self._beat_stop = threading.Event()
        self._beat_id = f"{socket.gethostname()}:{os.getpid()}"
        self._worker_stop = threading.Event()
        self._worker_id = ""
        self._worker_queues: list[str] = []

    def store(self) -> ResultsStore:
        if self._store is None or self._pid != os.getpid():
            broker = self.app.conf.broker_url
            self._store = store_for(broker, Path(self.app.conf.memhoncho_data_dir))
            self._pid = os.getpid()
        return self._store

    def _safely(self, action: str, call: Any) -> None:
        try:
            call(self.store())
        except Exception as exc:  # bookkeeping must never fail a task
            log.warning(
                "task result not recorded",
                extra={
                    "action": "results_not_recorded",
                    "step": action,
                    "error": type(exc).__name__,
                },
            )

    @staticmethod
    def _name(sender: Any) -> str | None:
        name = getattr(sender, "name", None) or (sender if isinstance(sender, str) else None)
        return name if isinstance(name, str) and name.startswith(TASK_PREFIX) else None

    def prerun(self, sender: Any = None, **_: Any) -> None:
        if name := self._name(sender):
            self._safely("start", lambda s: s.record_start(name, time.time()))

    def success(self, sender: Any = None, **_: Any) -> None:
        if name := self._name(sender):
            gave_up = getattr(getattr(sender, "request", None), GAVE_UP_ATTR, None)
            if isinstance(gave_up, ErrorSummary):  # returned normally, but did not do its job
                error = gave_up
                self._safely(
                    "gave_up", lambda s: s.record_failure(name, time.time(), error, retry=False)
                )
                return
            self._safely("success", lambda s: s.record_success(name, time.time()))

    def failure(self, sender: Any = None, exception: Any = None, **_: Any) -> None:
        if name := self._name(sender):
            error = ErrorSummary.of(exception)
            self._safely(
                "failure", lambda s: s.record_failure(name, time.time(), error, retry=False)
            )

    def retry(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        if name := self._name(sender):
            # ``reason`` is Celery's Retry; the error that caused it is its ``exc`` or, for a
            # ``self.retry()`` inside an ``except`` block, the exception being handled.
            cause = getattr(reason, "exc", None) or getattr(reason, "__context__", None) or reason
            if isinstance(cause, LockBusy):  # contention, not a failure: counted, not blamed
                self._safely("retry", lambda s: s.record_retry(name))
                return
            error = ErrorSummary.of(cause)
            self._safely("retry", lambda s: s.record_failure(name, time.time(), error, retry=True))

    def beat_started(self, sender: Any = None, **_: Any) -> None:
        """In a beat process: heartbeat now and every BEAT_HEARTBEAT_S, on a daemon thread."""
        self._beat_id = f"{socket.gethostname()}:{os.getpid()}"
        self._safely("beat", lambda s: s.beat_heartbeat(self._beat_id, time.time()))
        thread = threading.Thread(
            target=self._beat_loop, name="memhoncho-beat-heartbeat", daemon=True
        )
        thread.start()
        import atexit

        atexit.register(self._beat_stopped)

    def _beat_loop(self) -> None:
        while not self._beat_stop.wait(BEAT_HEARTBEAT_S):
            self._safely("beat", lambda s: s.beat_heartbeat(self._beat_id, time.time()))

    def _beat_stopped(self) -> None:
        self._beat_stop.set()
        self._safely("beat_gone", lambda s: s.beat_gone(self._beat_id))

    def worker_ready(self, sender: Any = None, **_: Any) -> None:
        """In a worker's main process: heartbeat with its queues, every BEAT_HEARTBEAT_S."""
        hostname = getattr(sender, "hostname", None) or socket.gethostname()
        self._worker_id = f"{hostname}:{os.getpid()}"
        self._worker_queues = sorted(self.app.amqp.queues.consume_from)  # names, after -Q
        self._worker_beat()
        thread = threading.Thread(
            target=self._worker_loop, name="memhoncho-worker-heartbeat", daemon=True
        )
        thread.start()

    def _worker_beat(self) -> None:
        self._safely(
            "worker",
            lambda s: s.worker_heartbeat(self._worker_id, time.time(), self._worker_queues),
        )

    def _worker_loop(self) -> None:
        while not self._worker_stop.wait(BEAT_HEARTBEAT_S):
            self._worker_beat()

    def worker_stopped(self, **_: Any) -> None:
        if self._worker_id:
            self._worker_stop.set()
            self._safely("worker_gone", lambda s: s.worker_gone(self._worker_id))


def connect(app: Any) -> None:
    """Record every memhoncho task of ``app`` from Celery's signals; beats send heartbeats."""
    from celery import signals

    recorder = _Recorder(app)
    app.memhoncho_results = recorder  # keeps the handlers alive and reachable for tests
    signals.task_prerun.connect(
        recorder.prerun, weak=False, dispatch_uid="memhoncho.results.prerun"
    )
    signals.task_success.connect(
        recorder.success, weak=False, dispatch_uid="memhoncho.results.success"
    )
    signals.task_failure.connect(
        recorder.failure, weak=False, dispatch_uid="memhoncho.results.failure"
    )
    signals.task_retry.connect(recorder.retry, weak=False, dispatch_uid="memhoncho.results.retry")
    signals.beat_init.connect(
        recorder.beat_started, weak=False, dispatch_uid="memhoncho.results.beat"
    )
    signals.beat_embedded_init.connect(
        recorder.beat_started, weak=False, dispatch_uid="memhoncho.results.beat_embedded"
    )
    signals.worker_ready.connect(
        recorder.worker_ready, weak=False, dispatch_uid="memhoncho.results.worker_ready"
    )
    signals.worker_shutdown.connect(
        recorder.worker_stopped, weak=False, dispatch_uid="memhoncho.results.worker_shutdown"
    )
