"""Parked conversations: one small file per conversation whose deliveries fail on Honcho.

The delivery engine parks a conversation when a delivery fails on a Honcho error (refused,
unreachable, a 5xx, a timeout), keeping when its failures began, how many there were and the
last one's code, and unparks it when a delivery of it ends well. The status view reads the
folder (``summary``), so its verdict says since when delivery fails and why, and turns healthy
only once every parked conversation has delivered, not at the first success of any task.

Like the hint marks these are an aid, not a record: not fsynced, and a park not renewed for
``stale_s`` (its conversation no longer tried, say it was purged) is left out of the summary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memhoncho.store.layout import Layout
from memhoncho.store.modes import make_dirs


def parked_dir(layout: Layout) -> Path:
    return layout.root / "state" / "parked"


def park(layout: Layout, key: str, code: str, at: float) -> None:
    """A delivery of ``key`` failed on Honcho at ``at`` with ``code``: park it, or renew it."""
    path = parked_dir(layout) / key
    previous = _read(path) or {}
    since = previous.get("since")
    entry = {
        "since": since if isinstance(since, int | float) else at,
        "at": at,
        "code": code,
        "failures": int(previous.get("failures") or 0) + 1,
    }
    temp = path.with_name(f".{key}.{os.getpid()}.tmp")
    try:
        make_dirs(path.parent)
        temp.write_text(json.dumps(entry))
        os.replace(temp, path)
    except OSError:
        temp.unlink(missing_ok=True)  # the park is an aid: the ledger keeps the failure


def unpark(layout: Layout, key: str) -> None:
    """A delivery of ``key`` ended well: it is no longer parked."""
    try:
        (parked_dir(layout) / key).unlink(missing_ok=True)
    except OSError:
        pass


def summary(layout: Layout, now: float, stale_s: float) -> dict[str, Any]:
    """How many conversations are parked, since when (the earliest), the newest failure's time
    and code, and the most failures of one."""
    entries = []
    try:
        names = [n for n in os.listdir(parked_dir(layout)) if not n.startswith(".")]
    except FileNotFoundError:
        names = []
    for name in names:
        entry = _read(parked_dir(layout) / name)
        if entry is not None and now - entry["at"] <= stale_s:
            entries.append(entry)
    newest = max(entries, key=lambda e: e["at"], default=None)
    return {
        "conversations": len(entries),
        "since": min((e["since"] for e in entries), default=None),
        "last_at": newest["at"] if newest else None,
        "last_code": newest["code"] if newest else None,
        "most_failures": max((e["failures"] for e in entries), default=0),
    }


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and all(
        isinstance(entry.get(k), int | float) for k in ("since", "at", "failures")
    )
    return entry if ok and isinstance(entry.get("code"), str) else None
