"""The fence: no look at Honcho, and no resend, while a lost request may still land.

Honcho has no idempotency key, and a request whose answer never came (a timeout, a dropped
connection, a killed worker, even a 429 or 5xx from a gateway that forwarded it) may be
committed after the client gave up. Listing what Honcho holds before that moment misses it,
and sending again stores it twice. So a request of unclear outcome is fenced: its start plus
the longest the client can take (``CLIENT_PHASES`` x ``honcho_timeout_s``) plus a settle margin
(``send_settle_s``) for the server's own lag. Only once that has passed is what Honcho holds
taken as final.

Delivery fences its in-flight mark (``Ledger.in_flight_since``); the fork clone fences the
parent's clone marker. Both call ``check``, which raises ``InFlightSettling`` with the wait,
and the task retries after it (a Celery countdown: no worker sleeps on a fence).
"""

from __future__ import annotations

import time

from memhoncho.errors import InFlightSettling
from memhoncho.settings import Settings

#: The SDK hands ``honcho_timeout_s`` to httpx as the limit of each phase of a request, not of
#: the whole: waiting for a pooled connection, connecting, writing and reading may each take
#: that long, so the client can still be sending (and the server still receiving) until four
#: timeouts after the start. (Seen on a loaded machine: a 1 s timeout, a fence of 1.5 s, and
#: a message the stand-in committed after the reconcile had looked.)
CLIENT_PHASES = 4


def window_s(settings: Settings) -> float:
    """Seconds after a request's start until it can no longer land (0 with the fence off)."""
    if not settings.send_fence:
        return 0.0
    return CLIENT_PHASES * settings.honcho_timeout_s + settings.send_settle_s


def remaining_s(started_at: float, settings: Settings, now: float | None = None) -> float:
    """Seconds until the fence of a request started at ``started_at`` opens (0 when open)."""
    now = time.time() if now is None else now
    return max(0.0, started_at + window_s(settings) - now)


def check(started_at: float, settings: Settings, what: str, now: float | None = None) -> None:
    """Raise InFlightSettling while a request started at ``started_at`` may still land."""
    wait = remaining_s(started_at, settings, now)
    if wait > 0:
        raise InFlightSettling(
            f"{what} may still land in Honcho; trying again when it cannot", wait_s=wait
        )
