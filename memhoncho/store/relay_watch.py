"""Is an outbox relay running on this data directory, and does anything wait for one.

The one answer ``memhoncho doctor`` and ``memhoncho status`` give. A relay is needed once a
capture that publishes no hint itself (``memhoncho capture``, a per-turn hook) left it a
request (``hint_marks.request_relay``): without a relay those records wait for the sweep.
A deployment whose hosts publish their own hints (``Host()``) needs none.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from memhoncho.store import hint_marks
from memhoncho.store.layout import Layout

#: seconds: a relay heartbeat older than this is a relay that is gone (it touches it every 5 s)
HEARTBEAT_STALE_S = 60.0

RUNNING = "running"  #: a relay touched its heartbeat lately
ABSENT = "absent"  #: no relay, and nothing waits for one
MISSING = "missing"  #: no relay, and captures wait for one (until the sweep)


@dataclass(frozen=True)
class RelayWatch:
    """What the relay heartbeats and the relay requests of one data directory say."""

    running: bool
    waiting: int  #: conversations whose relay request no relay has taken
    oldest_wait_s: float | None  #: age of the oldest such request; None when none waits

    @property
    def state(self) -> str:
        if self.running:
            return RUNNING
        return MISSING if self.waiting else ABSENT


def watch(layout: Layout, now: float | None = None) -> RelayWatch:
    """The relay's state from the files alone: cheap (two small directory listings)."""
    now = time.time() if now is None else now
    beats = layout.relay_heartbeat("-").parent
    try:
        newest = max((p.stat().st_mtime for p in beats.glob("relay-*")), default=0.0)
    except OSError:
        newest = 0.0
    ages = []
    folder = hint_marks.requests_dir(layout)
    for key in hint_marks.relay_requests(layout):
        try:
            ages.append(max(0.0, now - os.stat(folder / key).st_mtime))
        except OSError:
            continue  # taken meanwhile
    return RelayWatch(
        running=now - newest <= HEARTBEAT_STALE_S,
        waiting=len(ages),
        oldest_wait_s=round(max(ages), 3) if ages else None,
    )
