"""Celery's task signals wired to a results store; beat processes send heartbeats.

``connect(app)`` wires it; nothing happens at import. The store is built on first use, in the
process that uses it (a forked pool child builds its own).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from memhoncho.errors import LockBusy
from memhoncho.results.backend import ResultsStore, store_for
from memhoncho.results.record import ErrorSummary

log = logging.getLogger(__name__)

BEAT_HEARTBEAT_S = 15.0  # seconds between a beat's heartbeats
GAVE_UP_ATTR = "memhoncho_gave_up"  # set on a task's request by ``gave_up``


def gave_up(task: Any, exc: BaseException) -> None:
    """Called by a task that returns normally without doing its job (the work stays pending):
    the results record it as a failure with ``exc``'s code, not as a success."""
    try:
        setattr(task.request, GAVE_UP_ATTR, ErrorSummary.of(exc))
    except Exception:  # bookkeeping never fails a task
        pass


class Recorder:
    """The signal handlers of one app."""

    def __init__(self, app: Any, task_prefix: str) -> None:
        """``task_prefix``: the wire names recorded (the Celery edge's, ``routing.TASK_PREFIX``);
        passed in, since the edge sits above this module and imports it."""
        self.app = app
        self.task_prefix = task_prefix
        self._store: ResultsStore | None = None
        self._pid = 0
        self._beat_stop = threading.Event()
        self._beat_id = f"{socket.gethostname()}:{os.getpid()}"
        self._worker_stop = threading.Event()
        self._worker_id = ""
        self._worker_queues: list[str] = []

    def store(self) -> ResultsStore:
        if self._store is None or self._pid != os.getpid():
            from memhoncho.deployment import Deployment

            broker = self.app.conf.broker_url
            conf = self.app.conf
            config_dir = getattr(conf, "memhoncho_config_dir", None)
            deployment = Deployment.from_dirs(config_dir, conf.memhoncho_data_dir)
            store_url = deployment.settings().store_url
            self._store = store_for(broker, Path(conf.memhoncho_data_dir), store_url)
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

    def _name(self, sender: Any) -> str | None:
        name = getattr(sender, "name", None) or (sender if isinstance(sender, str) else None)
        return name if isinstance(name, str) and name.startswith(self.task_prefix) else None

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
        """In a worker's main process: heartbeat with its queues, every BEAT_HEARTBEAT_S.

        The status view reads these to tell a queue nobody consumes without asking the workers.
        """
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


def connect(app: Any, task_prefix: str) -> None:
    """Record every memhoncho task of ``app`` from Celery's signals; beats send heartbeats."""
    from celery import signals

    recorder = Recorder(app, task_prefix)
    app.memhoncho_results = recorder  # keeps the handlers alive and reachable for tests
    for signal, handler, uid in (
        (signals.task_prerun, recorder.prerun, "prerun"),
        (signals.task_success, recorder.success, "success"),
        (signals.task_failure, recorder.failure, "failure"),
        (signals.task_retry, recorder.retry, "retry"),
        (signals.beat_init, recorder.beat_started, "beat"),
        (signals.beat_embedded_init, recorder.beat_started, "beat_embedded"),
        (signals.worker_ready, recorder.worker_ready, "worker_ready"),
        (signals.worker_shutdown, recorder.worker_stopped, "worker_shutdown"),
    ):
        signal.connect(handler, weak=False, dispatch_uid=f"memhoncho.results.{uid}")
