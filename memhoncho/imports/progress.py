"""The newest import's progress, for the status view: ``state/import.json``.

Written by ``memhoncho import`` (not a dry run) at most once a second and when it ends,
atomically but not fsynced: it is a view of the outbox, never the data (an import killed
half-way shows ``running`` with its last counts until the next one starts: rerun it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memhoncho.store.atomic import write_json

if TYPE_CHECKING:
    from memhoncho.store.layout import Layout

FILE_NAME = "import.json"  # under state/
EVERY_S = 1.0  # seconds between writes while an import runs


def path(layout: Layout) -> Path:
    return layout.root / "state" / FILE_NAME


class Recorder:
    """Writes a running import's summary now and then, and once when it ends."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.started_at = time.time()
        self._written = 0.0

    def __call__(self, counts: dict[str, Any], *, finished: bool = False) -> None:
        """``counts``: ``Summary.counts()`` (path, format, conversations, totals, broken)."""
        now = time.monotonic()
        if not finished and now - self._written < EVERY_S:
            return
        self._written = now
        write_json(
            path(self.layout),
            {
                **counts,
                "state": "finished" if finished else "running",
                "started_at": self.started_at,
                "updated_at": time.time(),
            },
            durable=False,
        )


def read(layout: Layout) -> dict[str, Any] | None:
    """The newest import's progress; None when none ran; ValueError if unreadable."""
    try:
        raw = path(layout).read_bytes()
    except FileNotFoundError:
        return None
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not an import's progress")
    return value


def bucket(layout: Layout) -> dict[str, Any]:
    """The status view's ``import`` bucket: the newest import's progress (``last``: None when
    none ran)."""
    try:
        last = read(layout)
    except (OSError, ValueError):
        return {"state": "degraded", "reasons": [f"state/{FILE_NAME} cannot be read"], "last": None}
    return {"state": "ok", "last": last}
