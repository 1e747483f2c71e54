"""Per-conversation kernel file locks (``fcntl.flock``), released by the kernel when a process dies.

The outbox lock serializes appends and compaction of one outbox file and is held only for an
append or a rewrite. The conversation lock serializes delivery and fork resolution of one
conversation and may be held while waiting on Honcho, so capture never takes it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memhoncho.errors import LockBusy
from memhoncho.store.atomic import refused_as_store_error

POLL_S = 0.005  # seconds between attempts while waiting for a lock


@contextmanager
def file_lock(path: Path, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent).

    ``timeout_s=None`` blocks; ``0`` tries once. Raises LockBusy when it cannot be had in time.
    """
    with refused_as_store_error(path):  # creating it can meet a full disk
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        raise LockBusy() from None
                    time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
