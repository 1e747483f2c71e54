"""A lock held by one thread while another forks stays its holder's: the forked child (a pool
child replacing a killed one) must not keep it after the holder lets go."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from memhoncho.errors import LockBusy
from memhoncho.store.locks import file_lock


def test_a_child_forked_while_another_thread_holds_a_lock_does_not_keep_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.lock"
    held, forked = threading.Event(), threading.Event()

    def holder() -> None:  # the heartbeat thread recording into the results file
        with file_lock(path):
            held.set()
            forked.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    child = os.fork()
    if child == 0:  # the pool child: lives on, never touches the lock
        signal.pause()
        os._exit(0)
    try:
        forked.set()
        thread.join(10)
        with file_lock(path, timeout_s=2.0):  # before the fix: LockBusy while the child lives
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_a_lock_still_excludes_a_second_holder(tmp_path: Path) -> None:
    path = tmp_path / "outbox.lock"
    with file_lock(path), pytest.raises(LockBusy), file_lock(path, timeout_s=0):
        pass
    with file_lock(path, timeout_s=0):
        pass


def test_the_watchdogs_scanner_lock_is_not_kept_by_a_forked_child(tmp_path: Path) -> None:
    """The scanner lock is held for a worker's life, outside ``file_lock``: a pool child forked
    meanwhile must not keep it once the worker lets go, nor think itself the scanner."""
    from types import SimpleNamespace

    from memhoncho.store.layout import Layout
    from memhoncho.worker import watchdog

    deployment: Any = SimpleNamespace(layout=Layout(tmp_path))
    assert watchdog.hold_scanner_lock(deployment)
    reply_r, reply_w = os.pipe()
    child = os.fork()
    if child == 0:  # the pool child: asks whether it is the scanner, then lives on
        os.write(reply_w, b"1" if watchdog.hold_scanner_lock(deployment) else b"0")
        signal.pause()
        os._exit(0)
    try:
        assert os.read(reply_r, 1) == b"0"  # the worker holds it: the child is not the scanner
        watchdog.release_scanner_lock()
        with file_lock(tmp_path / "state" / "watchdog.lock", timeout_s=2.0):  # free again
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(reply_r)
        os.close(reply_w)
