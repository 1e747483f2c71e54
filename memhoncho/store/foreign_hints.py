"""Hints a worker got from another deployment: ``state/foreign-hints.json``, for the status view.

A count, and per sending identity its own count, the newest time and conversation: enough for
an operator to find the host whose data directory or store is not the workers'. Written only
when such a hint arrives, under its own lock, atomically (as ``redactions.py``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from memhoncho.store.atomic import write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.locks import file_lock

FILE_NAME = "foreign-hints.json"  # under state/
MAX_SENDERS = 20  # identities kept by name; the count covers them all


def _path(layout: Layout) -> Path:
    return layout.root / "state" / FILE_NAME


def read_foreign_hints(layout: Layout) -> dict[str, Any]:
    """``{"count": N, "last_at", "ours", "senders": {identity: {...}}}``; none is 0;
    ValueError when the file is unreadable."""
    try:
        raw = _path(layout).read_bytes()
    except FileNotFoundError:
        return {"count": 0, "last_at": None, "ours": None, "senders": {}}
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("count"), int):
        raise ValueError("not a foreign hint counter")
    return {
        "count": value["count"],
        "last_at": value.get("last_at"),
        "ours": value.get("ours"),
        "senders": value.get("senders") or {},
    }


def add_foreign_hint(layout: Layout, theirs: str, ours: str | None, conversation_id: str) -> int:
    """Count one hint of deployment ``theirs`` taken by a worker of ``ours``; the new total."""
    with file_lock(layout.lock_dir / "foreign-hints.lock"):
        try:
            current = read_foreign_hints(layout)
        except ValueError:
            current = {"count": 0, "senders": {}}
        now = time.time()
        senders: dict[str, Any] = current["senders"]
        sender = senders.pop(theirs, {"count": 0})
        senders[theirs] = {
            "count": sender["count"] + 1,
            "last_at": now,
            "conversation_id": conversation_id,
        }
        while len(senders) > MAX_SENDERS:  # the oldest named sender goes; the count stays
            senders.pop(next(iter(senders)))
        body = {"count": current["count"] + 1, "last_at": now, "ours": ours, "senders": senders}
        write_bytes(_path(layout), json.dumps(body).encode("utf-8"))
        return int(body["count"])
