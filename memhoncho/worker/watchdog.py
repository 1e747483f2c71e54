"""The watchdog: a thread in each worker that enqueues stranded conversations again.

Why here. A conversation strands when the worker holding its delivery dies (its hint comes back
on Redis only after the visibility timeout) and nothing else ever hints it again: beat may not
run, the host may capture nothing more. Whatever recovers it must run wherever delivery can
happen, with no beat and no capture, on every broker: the workers are the one process that is
always there when delivery is possible (no worker, no delivery to strand). So each worker's main
process runs this thread; it costs nothing per capture and looks every ``INTERVAL_S``
(``store/stranded.py`` says what is stranded). A look reads no ledger: on the files it is the
census's listing with a stat per outbox, re-reading only the files whose stat stamp changed,
and one listing of the hint marks; on PostgreSQL one query over the pending conversations'
partial index. Only a conversation past its bound costs a lock try and its enqueue.
``memhoncho bench watchdog`` measures a look at 100,000 conversations on both stores
(docs/performance.md): about 1.5 s warm on the files on 2 busy cores, well under on PostgreSQL.

One scanner per deployment on a machine: the thread that holds ``state/watchdog.lock`` (a kernel
lock, released when its worker dies, so another worker's thread takes over within one interval).
Across machines on a shared store, a hint is published only by whoever claims the conversation's
hint mark, exactly as a capture does, so two scanners never enqueue one conversation twice.
The prefork pool forks children from the worker's main process: a child would inherit the
lock's descriptor and keep the lock alive after its parent died, so the lock is counted among
the process's held locks (``store.locks.keep``), whose copies every forked child closes.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import bootsteps

from memhoncho.deployment import Deployment
from memhoncho.store import locks, stranded
from memhoncho.store.modes import make_dirs

log = logging.getLogger(__name__)

#: seconds between two looks; with ``stranded.SETTLE_S`` a conversation is enqueued again
#: within about 7 s of its bound
INTERVAL_S = 5.0
#: a look that took ``t`` seconds waits ``PAUSE_FACTOR * t`` before the next where it may, so
#: the watchdog costs a worker a fifth of a core: a look past 1 s (the files, near 100,000
#: conversations on a loaded machine) stretches the interval to ``5 t``
PAUSE_FACTOR = 4.0
#: the promise: a stranded conversation is enqueued again within this many seconds of its bound
PROMISE_S = 15.0


def pause_after(took: float) -> float:
    """Seconds to wait after a look that took ``took`` seconds.

    ``INTERVAL_S`` from look to look, stretched to ``PAUSE_FACTOR * took`` for a slow look, but
    never so far that a conversation that strands just after a look is checked waits past
    ``PROMISE_S``: it waits the settle time, the rest of that look, the pause and the next look
    (``SETTLE_S + pause + 2 took``). The pause never drops below the look itself, so the
    watchdog costs at most half a core; past a look of about 4.3 s the promise gives way first.
    """
    within_promise = PROMISE_S - stranded.SETTLE_S - 2 * took
    return max(INTERVAL_S - took, min(PAUSE_FACTOR * took, max(took, within_promise)))


_held_fd: int | None = None  # the scanner lock's descriptor, once this process took it


def hold_scanner_lock(deployment: Deployment) -> bool:
    """Whether this process is the deployment's scanner (taking the lock if it is free)."""
    global _held_fd
    if _held_fd is not None and locks.holds(_held_fd):
        return True
    path = deployment.layout.root / "state" / "watchdog.lock"
    try:
        make_dirs(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            log.warning("watchdog lock unusable", extra={"action": "watchdog_lock_failed"})
        return False
    locks.keep(fd)  # a forked pool child closes its copy (store/locks.py)
    _held_fd = fd
    return True


def release_scanner_lock() -> None:
    global _held_fd
    if _held_fd is not None:
        locks.let_go(_held_fd)
        _held_fd = None


def scan(deployment: Deployment, send: Callable[[str], Any]) -> list[str]:
    """Enqueue each stranded conversation once; returns their ids.

    The conversation's hint mark is claimed first, as a capture claims it: a hint published
    meanwhile by a capture or another scanner wins, and this one is not sent."""
    from memhoncho.worker.queue_depths import BusyQueues

    store = deployment.store()
    current = deployment.settings()
    enqueued = []
    for found in stranded.find(store, current, in_busy_queue=BusyQueues(deployment, current)):
        if not store.claim_hint(found.key):
            continue
        try:
            send(found.conversation_id)
        except Exception:  # noqa: BLE001 - the broker is down: the next look tries again
            store.release_hint(found.key)
            log.warning(
                "could not enqueue a stranded conversation; trying again at the next look",
                extra={"action": "stranded_not_enqueued", "conversation_key": found.key},
            )
            continue
        log.warning(
            "stranded conversation enqueued again",
            extra={"action": "stranded_enqueued", "conversation_key": found.key},
        )
        enqueued.append(found.conversation_id)
    return enqueued


class Watchdog(bootsteps.StartStopStep):
    """The worker bootstep that runs the watchdog thread (``create_app`` adds it)."""

    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(worker.app,), name="memhoncho-watchdog", daemon=True
        )
        self._thread.start()

    def stop(self, worker: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=INTERVAL_S)
        release_scanner_lock()

    def _run(self, app: Any) -> None:
        from memhoncho.worker import routing
        from memhoncho.worker.tasks import task_context

        deployment = task_context(app)

        def send(conversation_id: str) -> None:
            app.send_task(routing.DELIVER_TASK, args=[conversation_id], ignore_result=True)

        while True:
            started = time.monotonic()
            try:
                if hold_scanner_lock(deployment):
                    scan(deployment, send)
            except Exception:  # noqa: BLE001 - a store outage: the next look tries again
                log.warning("watchdog look failed", extra={"action": "watchdog_failed"})
            took = time.monotonic() - started
            if self._stop.wait(pause_after(took)):
                return
