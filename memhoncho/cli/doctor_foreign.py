"""doctor's ``foreign_hints`` check: a worker got delivery hints from another deployment (a host
captures into a data directory or store that no worker of this deployment reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memhoncho.status import foreign_hints

if TYPE_CHECKING:
    from memhoncho.deployment import Deployment


def finding(deployment: Deployment) -> tuple[str, str, str]:
    """(verdict, detail, action) for the check, from the status view's bucket."""
    found = foreign_hints.bucket(deployment)
    if found.get("count") is None:
        return "warn", "state/foreign-hints.json cannot be read", "see its file"
    words = foreign_hints.findings({"foreign_hints": found})
    if not words:
        return "pass", "no worker got a hint of another deployment", ""
    return (
        "fail",
        words[0][1],
        "point that host at this deployment's data directory (or store), or run workers for"
        " its own; then remove state/foreign-hints.json",
    )
