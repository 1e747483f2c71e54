"""The hint threads: a capture hands its hint's publish to one and waits for the outcome.

Why a thread at all is in ``hints.py``: the publish overlaps the capture's fsync. The hand-off
is one queue put and one lock (``Pending``), not ``ThreadPoolExecutor`` and its ``Future`` (a
condition, a work item and two more lock rounds on each side of every capture that publishes).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

HINT_THREADS = 4  # publishes in flight at once (hints.KEPT_CONNECTIONS are kept for them)
HINT_WAIT_S = 2.0  # at most this long for a publish (its own socket timeouts are shorter)


class Pending:
    """A publish handed to a hint thread: its outcome, once the thread releases ``_done``
    (one lock, created held)."""

    __slots__ = ("_done", "_sent")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._sent = False

    def finish(self, sent: bool) -> None:
        self._sent = sent
        self._done.release()

    def result(self, timeout: float) -> bool:
        """Whether the hint was published; False when it failed or did not finish in time."""
        return self._done.acquire(timeout=timeout) and self._sent


class HintPool:
    """``HINT_THREADS`` publisher threads fed by one queue, started on first use and again in
    a forked child (the parent's threads do not exist there).

    Daemon threads: a capture waits for its publish (up to ``HINT_WAIT_S``), and ``Host.close``
    for every publish in flight, so a process that exits without closing loses at most a hint
    past its wait; hints are level-triggered, and the relay and the sweep re-drive the work."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Callable[[], bool], Pending] | None] | None = None
        self._threads: list[threading.Thread] = []

    def submit(self, publish: Callable[[], bool]) -> Pending:
        if self._pid != os.getpid():
            self._pid, self._lock, self._queue, self._threads = (
                os.getpid(),
                threading.Lock(),
                None,
                [],
            )
        work = self._queue
        if work is None:
            with self._lock:
                work = self._queue or self._start()
        pending = Pending()
        work.put((publish, pending))
        return pending

    def _start(self) -> queue.SimpleQueue[tuple[Callable[[], bool], Pending] | None]:
        work: queue.SimpleQueue[tuple[Callable[[], bool], Pending] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(
                target=_publisher, args=(work,), name=f"memhoncho-hint-{n}", daemon=True
            )
            for n in range(HINT_THREADS)
        ]
        for thread in self._threads:
            thread.start()
        self._queue = work
        return work

    def shutdown(self) -> None:
        """Let the threads finish what is queued, then end them (in this process only)."""
        with self._lock:
            work, threads, self._queue, self._threads = self._queue, self._threads, None, []
        if work is not None and self._pid == os.getpid():
            for _ in threads:
                work.put(None)
            for thread in threads:
                thread.join()


def _publisher(work: queue.SimpleQueue[tuple[Callable[[], bool], Pending] | None]) -> None:
    while (item := work.get()) is not None:
        publish, pending = item
        sent = False
        try:
            sent = publish()
        except Exception:  # _send_hint handles the broker's errors; this is only a backstop
            log.exception("hint publish failed", extra={"action": "hint_failed"})
        finally:
            pending.finish(sent)


#: a hint being published on a hint thread, one to publish now (inline), or the decision made
Hint = Pending | Callable[[], bool] | bool


def settled(hint: Hint | None) -> bool:
    """Whether the hint was published (or one already waiting covers the line); False for no
    hint, a failure or no answer in time. An inline hint is published here."""
    if hint is None or isinstance(hint, bool):
        return bool(hint)
    if not isinstance(hint, Pending):
        return hint()
    return hint.result(HINT_WAIT_S)
