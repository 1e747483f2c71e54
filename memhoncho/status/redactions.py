"""The status view's ``redactions``: how many secrets capture replaced by ``[REDACTED]`` and when
last (``store/redactions.py``); never what."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memhoncho.deployment import Deployment


def bucket(deployment: Deployment) -> dict[str, Any]:
    """``{"state", "count", "last_at"}``; an unreadable counter is degraded, with its reason."""
    from memhoncho.store.redactions import read_redactions

    try:
        counter = read_redactions(deployment.layout)
    except (OSError, ValueError):
        return {
            "state": "degraded",
            "count": None,
            "last_at": None,
            "reasons": ["state/redactions.json cannot be read"],
        }
    return {"state": "ok", "count": counter["count"], "last_at": counter["last_at"]}
