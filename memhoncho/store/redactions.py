"""How many secrets capture has redacted: ``state/redactions.json``, for the status view.

A count and the time of the newest redaction, nothing else (never what was redacted). Written
only by a capture that redacted something, under its own lock, atomically; so a capture with no
secret pays nothing, and a crash leaves the old count or the new one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from memhoncho.store.atomic import write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.locks import file_lock

FILE_NAME = "redactions.json"  # under state/


def _path(layout: Layout) -> Path:
    return layout.root / "state" / FILE_NAME


def read_redactions(layout: Layout) -> dict[str, Any]:
    """``{"count": N, "last_at": t | None}``; a missing file is 0; ValueError if unreadable."""
    try:
        raw = _path(layout).read_bytes()
    except FileNotFoundError:
        return {"count": 0, "last_at": None}
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("count"), int):
        raise ValueError("not a redaction counter")
    return {"count": value["count"], "last_at": value.get("last_at")}


def add_redactions(layout: Layout, count: int) -> None:
    """Add ``count`` to the persisted total (a counter: an unreadable one restarts at 0)."""
    if count <= 0:
        return
    with file_lock(layout.lock_dir / "redactions.lock"):
        try:
            current = read_redactions(layout)["count"]
        except ValueError:
            current = 0
        body = {"count": current + count, "last_at": time.time()}
        write_bytes(_path(layout), json.dumps(body).encode("utf-8"))
