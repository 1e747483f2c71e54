"""Delivery hints published beside the capture's fsync rather than after it.

A capture writes its line under the outbox lock, then fsyncs. The hint's broker round trip
does not need the fsync to have finished: a worker reads the outbox under that same lock, so
it sees the line only once the fsync is done and the lock released. So a small thread pool
publishes while the capturing thread fsyncs, and the capture waits for the publish before it
returns, so ``enqueued`` still says what happened. A hint that goes out for a line whose fsync
then fails is harmless: hints are level-triggered ("this conversation may have work").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

HINT_THREADS = 4  # publishes in flight at once (the host's broker pool holds 4 connections)
HINT_WAIT_S = 2.0  # at most this long for a publish (its own socket timeouts are shorter)


class HintPool:
    """A lazily started pool of publisher threads, restarted in a forked child."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, publish: Callable[[], bool]) -> Future[bool]:
        if self._pid != os.getpid():  # forked: the parent's threads do not exist here
            self._pid, self._lock, self._executor = os.getpid(), threading.Lock(), None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(HINT_THREADS, "memhoncho-hint")
            return self._executor.submit(publish)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)


def settled(hint: Future[bool] | bool | None) -> bool:
    """Whether the hint was published (or one already waiting covers the line); False for no
    hint, a failure or no answer in time."""
    if hint is None or isinstance(hint, bool):
        return bool(hint)
    try:
        return hint.result(timeout=HINT_WAIT_S)
    except FutureTimeout:
        return False
