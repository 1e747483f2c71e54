"""The status view's ``hints``: delivery hints that failed for a reason other than the broker
being down (an import error, a bug), and ``refused_tasks``: recall tasks a worker refused for a
proof that was not the deployment's (``store/counters.py``). A failed hint repeats at every
capture, so it degrades the verdict while its last one is recent; a refused task means someone
on the broker forges calls, so it fails the verdict while recent."""

from __future__ import annotations

import time
from typing import Any

from memhoncho.deployment import Deployment

DEGRADED = "degraded"
FAILING = "failing"
RECENT_S = 3600.0  # seconds: a failed hint younger than this degrades the verdict


def bucket(deployment: Deployment) -> dict[str, Any]:
    """``{"state", "failed", "last_at", "last_error"}``; an unreadable file is degraded."""
    from memhoncho.store import counters

    try:
        found = counters.read_count(deployment.layout, counters.HINT_FAILURES)
    except (OSError, ValueError):
        return {"state": DEGRADED, "reasons": ["state/hint-failures.json cannot be read"]}
    return {"state": "ok", "failed": found["count"], **found}


def refused_bucket(deployment: Deployment) -> dict[str, Any]:
    """``{"state", "count", "last_at", "last_error"}`` of the refused recall tasks."""
    from memhoncho.store import counters

    try:
        found = counters.read_count(deployment.layout, counters.REFUSED_TASKS)
    except (OSError, ValueError):
        return {"state": DEGRADED, "reasons": ["state/refused-tasks.json cannot be read"]}
    return {"state": "ok", **found}


def findings(view: dict[str, Any], now: float | None = None) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    hints = view.get("hints") or {}
    ago = _recent(hints.get("failed"), hints.get("last_at"), now)
    if ago is not None:
        found.append(
            (
                DEGRADED,
                f"{hints['failed']} delivery hint(s) failed, not for a broker outage (last"
                f" {ago:.0f} s ago: {hints.get('last_error')}); the relay and the sweep"
                " re-drive the work, but check the install (memhoncho doctor)",
            )
        )
    refused = view.get("refused_tasks") or {}
    ago = _recent(refused.get("count"), refused.get("last_at"), now)
    if ago is not None:
        found.append(
            (
                FAILING,
                f"{refused['count']} recall task(s) refused: their proof was not this"
                f" deployment's (last {ago:.0f} s ago); something on the broker forges calls"
                " (secure the broker)",
            )
        )
    return found


def _recent(count: Any, last_at: Any, now: float | None) -> float | None:
    """Seconds since the last of ``count`` events, when there was one under ``RECENT_S`` ago."""
    if not count or not isinstance(last_at, int | float):
        return None
    ago = (time.time() if now is None else now) - last_at
    return ago if ago <= RECENT_S else None


def table_rows(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = view.get("hints") or {}
    if found.get("failed") is None:
        return [("hints", "failed", "unknown")]
    rows = [("hints", "failed", str(found["failed"]))]
    if found.get("last_error"):
        rows.append(("hints", "last_error", str(found["last_error"])[:80]))
    refused = view.get("refused_tasks") or {}
    if refused.get("count"):
        rows.append(("refused_tasks", "count", str(refused["count"])))
    return rows
