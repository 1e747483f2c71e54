"""The status view's ``hints``: delivery hints that failed for a reason other than the broker
being down (``store/hint_failures.py``): an import error, a bug. Such a failure repeats at every
capture, so it degrades the verdict while its last one is recent."""

from __future__ import annotations

import time
from typing import Any

from memhoncho.deployment import Deployment

DEGRADED = "degraded"
RECENT_S = 3600.0  # seconds: a failed hint younger than this degrades the verdict


def bucket(deployment: Deployment) -> dict[str, Any]:
    """``{"state", "failed", "last_at", "last_error"}``; an unreadable file is degraded."""
    from memhoncho.store.hint_failures import read_hint_failures

    try:
        found = read_hint_failures(deployment.layout)
    except (OSError, ValueError):
        return {"state": DEGRADED, "reasons": ["state/hint-failures.json cannot be read"]}
    return {"state": "ok", **found}


def findings(view: dict[str, Any], now: float | None = None) -> list[tuple[str, str]]:
    found = view.get("hints") or {}
    last_at = found.get("last_at")
    if not found.get("failed") or not isinstance(last_at, int | float):
        return []
    ago = (time.time() if now is None else now) - last_at
    if ago > RECENT_S:
        return []
    return [
        (
            DEGRADED,
            f"{found['failed']} delivery hint(s) failed, not for a broker outage (last"
            f" {ago:.0f} s ago: {found.get('last_error')}); the relay and the sweep re-drive"
            " the work, but check the install (memhoncho doctor)",
        )
    ]


def table_rows(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = view.get("hints") or {}
    if found.get("failed") is None:
        return [("hints", "failed", "unknown")]
    rows = [("hints", "failed", str(found["failed"]))]
    if found.get("last_error"):
        rows.append(("hints", "last_error", str(found["last_error"])[:80]))
    return rows
