"""Hints that failed for a reason other than the broker being down: ``state/hint-failures.json``.

A broker that is down is weather (the sender backs off, the relay and the sweep re-drive the
work); a hint that fails on an import error or a bug fails the same way every time, and the
person must see it. A count, when last, and the last error's type and words (memhoncho's and
the library's, never content): written only on such a failure, under its own lock, atomically
(as ``redactions.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from memhoncho.store.atomic import write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.locks import file_lock

FILE_NAME = "hint-failures.json"  # under state/
ERROR_CHARS = 300  # the last error's words kept, at most


def _path(layout: Layout) -> Path:
    return layout.root / "state" / FILE_NAME


def read_hint_failures(layout: Layout) -> dict[str, Any]:
    """``{"failed": N, "last_at", "last_error"}``; none is 0; ValueError when unreadable."""
    try:
        raw = _path(layout).read_bytes()
    except FileNotFoundError:
        return {"failed": 0, "last_at": None, "last_error": None}
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("failed"), int):
        raise ValueError("not a hint failure counter")
    return {
        "failed": value["failed"],
        "last_at": value.get("last_at"),
        "last_error": value.get("last_error"),
    }


def add_hint_failure(layout: Layout, error: str) -> int:
    """Count one failed hint whose cause was ``error`` (``Type: words``); the new total."""
    with file_lock(layout.lock_dir / "hint-failures.lock"):
        try:
            current = read_hint_failures(layout)["failed"]
        except ValueError:
            current = 0
        body = {"failed": current + 1, "last_at": time.time(), "last_error": error[:ERROR_CHARS]}
        write_bytes(_path(layout), json.dumps(body).encode("utf-8"))
        return current + 1
