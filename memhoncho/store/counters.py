"""Events the person must see, counted: ``state/<name>.json`` for the status view.

A count, when last, and the last one's cause (its type and memhoncho's or the library's words,
never content). Two are kept: ``hint-failures`` (hints that failed for a reason other than the
broker being down: an import error, a bug; a broker that is down is weather and not counted)
and ``refused-tasks`` (recall tasks whose proof was not the deployment's: ``worker/task_proof``).
Written only when such an event happens, under its own lock, atomically (as ``redactions.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from memhoncho.store.atomic import write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.locks import file_lock

HINT_FAILURES = "hint-failures"
REFUSED_TASKS = "refused-tasks"
ERROR_CHARS = 300  # the last cause's words kept, at most


def _path(layout: Layout, name: str) -> Path:
    return layout.root / "state" / f"{name}.json"


def read_count(layout: Layout, name: str) -> dict[str, Any]:
    """``{"count": N, "last_at", "last_error"}``; none is 0; ValueError when unreadable."""
    try:
        raw = _path(layout, name).read_bytes()
    except FileNotFoundError:
        return {"count": 0, "last_at": None, "last_error": None}
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("count"), int):
        raise ValueError(f"not a counter: {name}")
    return {
        "count": value["count"],
        "last_at": value.get("last_at"),
        "last_error": value.get("last_error"),
    }


def add_one(layout: Layout, name: str, cause: str) -> int:
    """Count one event whose cause was ``cause`` (``Type: words``); the new total."""
    with file_lock(layout.lock_dir / f"{name}.lock"):
        try:
            current = read_count(layout, name)["count"]
        except ValueError:
            current = 0
        body = {"count": current + 1, "last_at": time.time(), "last_error": cause[:ERROR_CHARS]}
        write_bytes(_path(layout, name), json.dumps(body).encode("utf-8"))
        return current + 1
