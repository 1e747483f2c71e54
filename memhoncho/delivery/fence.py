"""The fence: no look at Honcho, and no resend, while a lost request may still land.

Honcho has no idempotency key, and a request whose answer never came (a timeout, a dropped
connection, a killed worker, even a 429 or 5xx from a gateway that forwarded it) may be
committed after the client gave up. Listing what Honcho holds before that moment misses it,
and sending again stores it twice. So a request of unclear outcome is fenced: its start plus
the longest the client can be sending it (``honcho_timeout_s``: one deadline for the whole
request, ``honcho/deadline.py``) plus a settle margin (``send_settle_s``) for the server's own
lag. Only once that has passed is what Honcho holds taken as final.

A request that provably never reached Honcho (refused, or no connection made: the table in
``honcho/retry.py``) cannot land and is not fenced: its mark is cleared as it fails.

Delivery fences its in-flight mark (``Ledger.in_flight_since``); the fork clone fences the
parent's clone marker. Both call ``check``, which raises ``InFlightSettling`` with the wait,
and the task retries after it (a Celery countdown: no worker sleeps on a fence).
"""

from __future__ import annotations

import time

from memhoncho.errors import InFlightSettling
from memhoncho.settings import Settings


def window_s(settings: Settings) -> float:
    """Seconds after a request's start until it can no longer land (0 with the fence off):
    the client's deadline for the whole request, then the settle margin."""
    if not settings.send_fence:
        return 0.0
    return settings.honcho_timeout_s + settings.send_settle_s


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
