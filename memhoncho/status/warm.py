"""The status view kept warm in the relay, so ``memhoncho status`` answers at once.

A one-shot ``memhoncho status`` pays for pydantic, the settings and the census of every outbox
(about 0.8 s at 10k conversations); the relay holds one ``StatusReader`` instead, whose census
cache is in memory. A read there still stats every outbox (about 80 ms at 10k), so the relay
keeps the last view and answers from it when it is at most ``max_age_s`` old; an older one is
read anew before the answer. While someone asks (a request in the last ``WATCH_S``), a thread
reads it again every ``REFRESH_S`` and draws the table for the last terminal that asked (rich
takes ~15 ms for it), so a watching operator (``watch memhoncho status``) is answered at once
with a view at most about ``REFRESH_S`` old. Nobody asking costs nothing. The view's
``generated_at`` says when it was read; ``--max-age 0`` asks for a fresh one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from memhoncho.deployment import Deployment
from memhoncho.status.render import Style, drawn_table
from memhoncho.status.view import StatusReader

REFRESH_S = 1.0  #: seconds between reads while someone watches
WATCH_S = 60.0  #: seconds after the last request during which the view is kept fresh


class WarmStatus:
    """One deployment's status view, read at most once per request or ``REFRESH_S``."""

    def __init__(self, deployment: Deployment, *, refresh_s: float = REFRESH_S) -> None:
        self.reader = StatusReader(deployment)
        self.refresh_s = refresh_s
        self._lock = threading.Lock()  # one read at a time; askers who need it share it
        #: the last view and the monotonic time its read began, replaced whole (no torn pair)
        self._latest: tuple[float, dict[str, Any]] | None = None
        self._asked_at = -WATCH_S
        #: the last table drawn: from which view, in which style; and the last style asked
        self._drawn: tuple[dict[str, Any], Style, str] | None = None
        self._style: Style | None = None
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def view(self, max_age_s: float) -> dict[str, Any]:
        """The view, read anew unless the last read began at most ``max_age_s`` ago (0: a
        read that begins after this call)."""
        asked = time.monotonic()
        self._asked_at = asked
        self._keep_fresh()
        latest = self._latest
        if latest is not None and asked - latest[0] <= max_age_s:
            return latest[1]  # without the lock: a refresh in progress does not delay it
        with self._lock:
            latest = self._latest
            if latest is None or asked - latest[0] > max_age_s:
                latest = self._read()
            return latest[1]

    def table(self, max_age_s: float, style: Style) -> str:
        """The view as a table drawn in ``style``, drawn once per read and style."""
        self._style = style
        view = self.view(max_age_s)
        drawn = self._drawn
        if drawn is not None and drawn[0] is view and drawn[1] == style:
            return drawn[2]
        return self._draw(view, style)

    def _draw(self, view: dict[str, Any], style: Style) -> str:
        text = drawn_table(view, style)
        self._drawn = (view, style, text)
        return text

    def _read(self) -> tuple[float, dict[str, Any]]:
        started = time.monotonic()
        view = self.reader.read()  # never raises: a bad source degrades its bucket
        self._latest = (started, view)
        return self._latest

    def _keep_fresh(self) -> None:
        """Start the refreshing thread at the first request (a relay nobody asks has none)."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._refresh, name="status", daemon=True)
                self._thread.start()

    def _refresh(self) -> None:
        while True:
            time.sleep(self.refresh_s)
            if time.monotonic() - self._asked_at > WATCH_S:
                continue
            with self._lock:
                latest = self._latest
                if latest is None or time.monotonic() - latest[0] >= self.refresh_s:
                    latest = self._read()
                    if self._style is not None:
                        self._draw(latest[1], self._style)
