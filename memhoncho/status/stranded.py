"""The status view's stranded conversations: pending records, nothing queued or running.

``store/stranded.py`` says which conversations are stranded and since when they could have
been delivered again (their bound); the workers' watchdog enqueues them again within seconds.
So one counted here for long means no watchdog runs (no live worker of this deployment) or it
cannot publish: degraded once past the bound, failing (naming them) once any is more than
``FAILING_PAST_S`` past it. ``doctor``'s ``stranded`` check reads the same bucket.
"""

from __future__ import annotations

import time
from typing import Any

from memhoncho.deployment import Deployment
from memhoncho.settings import Settings

#: seconds past its bound after which a stranded conversation fails the verdict
FAILING_PAST_S = 60.0
#: conversations named in the bucket (the longest stranded first); the count is of them all
NAMED = 20


def bucket(
    deployment: Deployment,
    current: Settings,
    now: float | None = None,
    depths: dict[str, int] | None = None,
) -> dict[str, Any]:
    """``{"state", "count", "oldest_past_bound_s", "conversations": [...]}``; ``depths``: the
    queues' depths the view already read (else the broker is asked, if a mark is old)."""
    from memhoncho.store import stranded
    from memhoncho.worker.queue_depths import BusyQueues

    now = time.time() if now is None else now
    busy = BusyQueues(deployment, current, depths)
    found = stranded.find(deployment.store(), current, now=now, in_busy_queue=busy)
    return {
        "state": "ok",
        "count": len(found),
        "oldest_past_bound_s": round(found[0].past_bound_s(now), 3) if found else 0.0,
        "conversations": [
            {
                "conversation_id": s.conversation_id,
                "past_bound_s": round(s.past_bound_s(now), 3),
                "pending_for_s": round(max(0.0, now - s.oldest_pending_at), 3)
                if s.oldest_pending_at
                else None,
            }
            for s in found[:NAMED]
        ],
    }


def described(view: dict[str, Any]) -> tuple[int, list[str], list[str]]:
    """How many are stranded, those named, and those of them past ``FAILING_PAST_S``."""
    found = view.get("stranded") or {}
    named = found.get("conversations") or []
    ids = [str(c.get("conversation_id")) for c in named]
    late = [
        str(c.get("conversation_id"))
        for c in named
        if (c.get("past_bound_s") or 0.0) > FAILING_PAST_S
    ]
    return int(found.get("count") or 0), ids, late


def table_rows(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = view.get("stranded") or {}
    if "count" not in found:
        return [("stranded", "count", "unknown")]
    rows = [
        ("stranded", "count", str(found["count"])),
        ("stranded", "oldest_past_bound_s", f"{found.get('oldest_past_bound_s', 0.0):.1f}"),
    ]
    for c in found.get("conversations") or []:
        rows.append(("stranded", str(c.get("conversation_id")), f"{c.get('past_bound_s'):.1f} s"))
    return rows
