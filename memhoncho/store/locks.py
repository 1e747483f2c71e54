"""Per-conversation kernel file locks (``fcntl.flock``), released by the kernel when a process dies.

The outbox lock serializes appends and compaction of one outbox file and is held only for an
append or a rewrite. The conversation lock serializes delivery and fork resolution of one
conversation and may be held while waiting on Honcho, so capture never takes it.

A flock belongs to the open file, which ``fork`` shares with the child: a worker whose pool forks
a child while one of its threads holds a lock (the heartbeat's hold on the results file while a
killed child is replaced) would leave the child holding it after the parent closed its copy,
and every process waiting on it blocked for the child's life. So a lock is released with
``LOCK_UN`` (which unlocks the shared file for both) before it is closed, and a forked child
closes its copies of the locks other threads held (it has none of their threads).
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
from memhoncho.store.modes import make_dirs, open_file

POLL_S = 0.005  # seconds between attempts while waiting for a lock

#: the descriptors of the locks this process holds, with the pid that took each
_held: dict[int, int] = {}
_fork_hook = False  # os.register_at_fork done (once a process, on the first lock)


def _close_inherited() -> None:
    """In a forked child: close the copies of the locks its parent's threads held."""
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


def _hook_fork() -> None:
    global _fork_hook
    if not _fork_hook:
        os.register_at_fork(after_in_child=_close_inherited)
        _fork_hook = True


def keep(fd: int) -> None:
    """Count a lock taken on ``fd`` outside ``file_lock`` and held long (the watchdog's scanner
    lock) among this process's: a forked child closes its copy, as it does ``file_lock``'s."""
    _hook_fork()
    _held[fd] = os.getpid()


def holds(fd: int) -> bool:
    """Whether this process holds the lock it ``keep``s on ``fd`` (a forked child does not)."""
    return _held.get(fd) == os.getpid()


def let_go(fd: int) -> None:
    """Release a lock ``keep`` counted, in the process that took it."""
    if _held.pop(fd, None) == os.getpid():
        _release(fd)


@contextmanager
def file_lock(path: Path, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent).

    ``timeout_s=None`` blocks; ``0`` tries once. Raises LockBusy when it cannot be had in time.
    """
    _hook_fork()
    with refused_as_store_error(path):  # creating it can meet a full disk
        try:  # the lock file of a conversation seen before: one open, no look at the folder
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            make_dirs(path.parent)
            fd = open_file(path, os.O_RDWR | os.O_CREAT)
    taken = False
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
        _held[fd] = os.getpid()
        taken = True
        yield
    finally:
        if not taken:
            os.close(fd)
        elif _held.pop(fd, None) == os.getpid():
            _release(fd)
        # else: a child forked inside the block; its copy was closed at the fork


def _release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)  # for every process sharing the open file
    except OSError:
        pass
    finally:
        os.close(fd)
