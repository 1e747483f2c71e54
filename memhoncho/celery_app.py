"""The documented ``celery -A memhoncho.celery_app worker|beat|flower`` target.

The app itself is built in ``memhoncho.worker.app``; this module only names it, so the
command operators type stays the same wherever the code lives. Nothing is built at import.
"""

from __future__ import annotations

from typing import Any

from memhoncho.worker.app import (
    beat_schedule,
    close_app,
    command_app,
    create_app,
    embedded_broker,
    get_app,
)

__all__ = ["beat_schedule", "close_app", "command_app", "create_app", "embedded_broker", "get_app"]


def __getattr__(name: str) -> Any:
    """``app`` (what ``celery -A`` looks up) is built on first access; a worker or beat on
    bad settings or an uninitialised data directory exits 2 with the error (``command_app``)."""
    if name == "app":
        return command_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
