"""The status view's ``foreign_hints``: delivery hints a worker got from another deployment
(``worker/foreign.py`` counts them in ``store/foreign_hints.py``). Any fails the verdict and
doctor: a host captures into a data directory or store that this deployment's workers never
read, so its turns do not reach Honcho."""

from __future__ import annotations

from typing import Any

from memhoncho.deployment import Deployment

FAILING = "failing"
SHOWN = 3  # sending identities named in the verdict and the table


def bucket(deployment: Deployment) -> dict[str, Any]:
    """``{"state", "count", "last_at", "ours", "senders"}``; an unreadable file is degraded."""
    from memhoncho.store.foreign_hints import read_foreign_hints

    try:
        found = read_foreign_hints(deployment.layout)
    except (OSError, ValueError):
        return {"state": "degraded", "reasons": ["state/foreign-hints.json cannot be read"]}
    return {"state": "ok", **found}


def findings(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The verdict's words for foreign hints: failing as soon as there is one."""
    found = view.get("foreign_hints") or {}
    if not found.get("count"):
        return []
    senders = list((found.get("senders") or {}).items())[-SHOWN:]
    named = ", ".join(
        f"{who} ({s.get('count')}, e.g. {s.get('conversation_id')})" for who, s in senders
    )
    return [
        (
            FAILING,
            f"{found['count']} delivery hint(s) came from another deployment than the workers'"
            f" ({found.get('ours')}): {named}; a host captures where no worker reads (check its"
            " MEMHONCHO_DATA_DIR or store_url)",
        )
    ]


def table_rows(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = view.get("foreign_hints") or {}
    if found.get("count") is None:
        return [("foreign_hints", "count", "unknown")]
    rows = [("foreign_hints", "count", str(found["count"]))]
    for who, sender in list((found.get("senders") or {}).items())[-SHOWN:]:
        rows.append(("foreign_hints", who, str(sender.get("count"))))
    return rows
