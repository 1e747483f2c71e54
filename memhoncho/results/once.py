"""A remember run by a worker is stored once, however often its caller retries it.

Honcho has no idempotency key for a conclusion, so the key is the Celery task id, which the
host derives from the call itself (``worker.remote_recall.task_id_for``): a retried remember is the
same task. Before storing, the worker looks for that task's answer (an earlier attempt that
succeeded answers again, nothing is stored), then claims the task in the result backend,
atomically (a retry that arrives while the first attempt still runs waits for its answer).
A claim lasts the caller's wait; a failed attempt releases it, so a retry stores it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from memhoncho.store.modes import open_file

CLAIM_PREFIX = "memhoncho-once-"
POLL_S = 0.1  # seconds between looks at the answer of an attempt another worker runs


def _answered(backend: Any, task_id: str) -> dict[str, Any] | None:
    meta = backend.get_task_meta(task_id, cache=False)
    found = meta.get("result") if meta.get("status") == "SUCCESS" else None
    return found if isinstance(found, dict) and found.get("ok") else None


def claim(backend: Any, task_id: str, ttl_s: float) -> bool:
    """True when this attempt is the one to run: nobody holds a live claim on the task."""
    key = f"{CLAIM_PREFIX}{task_id}"
    kind = type(backend).__name__
    if kind == "StoreResultBackend":
        return bool(backend.claim(key, ttl_s))
    if kind == "RedisBackend":
        return bool(backend.client.set(key, b"1", nx=True, px=max(1, int(ttl_s * 1000))))
    if kind == "FilesystemBackend":
        path = os.path.join(os.fsdecode(backend.path), key)
        for _ in range(2):
            try:
                os.close(open_file(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return True
            except FileExistsError:
                try:
                    if time.time() - os.stat(path).st_mtime <= ttl_s:
                        return False
                    os.unlink(path)  # a claim past its time: its holder is gone
                except FileNotFoundError:
                    continue
        return False
    raise TypeError(f"no claim on a {kind} result backend")  # create_app configures none


def release(backend: Any, task_id: str) -> None:
    key = f"{CLAIM_PREFIX}{task_id}"
    kind = type(backend).__name__
    if kind == "StoreResultBackend":
        backend.delete(key)
    elif kind == "RedisBackend":
        backend.client.delete(key)
    elif kind == "FilesystemBackend":
        try:
            os.unlink(os.path.join(os.fsdecode(backend.path), key))
        except FileNotFoundError:
            pass


def run_once(
    backend: Any,
    task_id: str,
    run: Callable[[], dict[str, Any]],
    wait_s: float,
    late: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """``run()``'s outcome once per task id: an earlier success answers again; a concurrent
    attempt is waited for; ``late()`` answers when that attempt has not answered in ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        earlier = _answered(backend, task_id)
        if earlier is not None:
            return earlier
        if claim(backend, task_id, wait_s):
            outcome = run()
            if not outcome.get("ok"):
                release(backend, task_id)  # nothing stored (or unclear): a retry may try again
            return outcome
        if time.monotonic() >= deadline:
            return late()
        time.sleep(POLL_S)
