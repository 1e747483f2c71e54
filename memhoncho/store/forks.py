"""Pending-fork records: ``state/forks/pending/<child key>.json``, written by the host, no network.

A record says "this conversation was forked from that one at this entry; its Honcho session is
not established yet". It is created exclusively (a second fork of the same child is refused, even
when two hosts race) and removed by the worker that resolved the fork, under the child's lock.
Decisions are also appended to ``state/forks/decisions.jsonl`` for the status view.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memhoncho.errors import MemhonchoError
from memhoncho.models import ForkDecision, ForkRecord
from memhoncho.store.atomic import (
    append_durably,
    fsync_dir,
    read_model,
    refused_as_store_error,
    write_json,
)
from memhoncho.store.layout import Layout, keys_in
from memhoncho.store.modes import make_dirs, set_file_mode

if TYPE_CHECKING:
    from memhoncho.store.base import Store

DECISIONS_FILE = "decisions.jsonl"
CLONING_DIR = "cloning"
RECENT_DECISIONS = 10  # decisions listed in the status view


def decisions_path(layout: Layout) -> Path:
    return layout.pending_forks_dir.parent / DECISIONS_FILE


def read_fork(layout: Layout, key: str) -> ForkRecord | None:
    """The child's pending fork; None when it has none; CorruptFile when it cannot be parsed."""
    return read_model(layout.pending_fork(key), ForkRecord, "the conversation's fork record")


def create_fork(layout: Layout, key: str, record: ForkRecord) -> bool:
    """Write the record durably unless one exists already (then False, nothing changed).

    ``os.link`` of a fully written temp file makes creation both atomic and exclusive.
    """
    path = layout.pending_fork(key)
    with refused_as_store_error(path):
        return _create(path, record)


def _create(path: Path, record: ForkRecord) -> bool:
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    set_file_mode(fd, path.parent)  # 0600, or the group's 0660 (store/modes.py)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(record.model_dump_json().encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def remove_fork(layout: Layout, key: str) -> None:
    """Forget the child's pending fork (its decision is in the child's ledger by now)."""
    try:
        os.unlink(layout.pending_fork(key))
    except FileNotFoundError:
        return
    fsync_dir(layout.pending_forks_dir)


def pending_fork_keys(layout: Layout) -> list[str]:
    """Every child with a pending fork record, sorted."""
    return keys_in(layout.pending_forks_dir, ".json")


def append_decision(layout: Layout, key: str, decision: ForkDecision) -> None:
    """One line per decision, for the status view (a retried decision repeats its child key)."""
    line = {"child": key, **decision.model_dump(mode="json")}
    append_durably(decisions_path(layout), (json.dumps(line, sort_keys=True) + "\n").encode())


def read_decisions(layout: Layout) -> dict[str, dict[str, Any]]:
    """The latest decision per child key; torn or foreign lines are skipped."""
    try:
        raw = decisions_path(layout).read_bytes()
    except FileNotFoundError:
        return {}
    latest: dict[str, dict[str, Any]] = {}
    for line in raw.split(b"\n"):
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("child"), str):
            latest[item["child"]] = item
    return latest


def clone_marker_path(layout: Layout, parent_key: str) -> Path:
    """``state/forks/cloning/<parent>.json``: present while someone writes to the parent's clone."""
    return layout.pending_forks_dir.parent / CLONING_DIR / f"{parent_key}.json"


def read_clone_marker(layout: Layout, parent_key: str) -> dict[str, Any] | None:
    """The parent's cloning marker; an unreadable one counts as present (the safe side)."""
    try:
        value = json.loads(clone_marker_path(layout, parent_key).read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def write_clone_marker(layout: Layout, parent_key: str, marker: dict[str, Any]) -> None:
    write_json(clone_marker_path(layout, parent_key), marker)


def remove_clone_marker(layout: Layout, parent_key: str) -> None:
    path = clone_marker_path(layout, parent_key)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def fork_summary(store: Store) -> dict[str, Any]:
    """Pending forks and how resolved ones began, for the status view (either store)."""
    now = time.time()
    keys = store.pending_fork_keys()
    oldest: float | None = None
    for key in keys:
        try:
            record = store.read_fork(key)
        except MemhonchoError:
            continue
        if record is not None and (oldest is None or record.created_at < oldest):
            oldest = record.created_at
    decisions = store.read_decisions()
    outcomes: dict[str, int] = {}
    for item in decisions.values():
        outcomes[str(item.get("outcome"))] = outcomes.get(str(item.get("outcome")), 0) + 1
    recent = sorted(decisions.values(), key=lambda d: d.get("decided_at") or 0)[-RECENT_DECISIONS:]
    return {
        "pending": len(keys),
        "oldest_pending_age_s": round(max(0.0, now - oldest), 3) if oldest else None,
        "decisions": outcomes,
        "recent": [
            {k: d.get(k) for k in ("child", "outcome", "anchor_entry", "reason", "decided_at")}
            for d in reversed(recent)
        ],
    }
