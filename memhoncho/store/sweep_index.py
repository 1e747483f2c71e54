"""The sweep index (``state/sweep-index.json``): conversations the last sweep found clean.

"Clean" means nothing pending and nothing to compact, which is an outbox holding no record at
all (only a mark line, or nothing): whatever the ledger says, such a file needs no work. The
index keeps, per clean conversation, the stat stamp of its outbox as it was *before* the sweep
looked, so a sweep with nothing pending costs one stat per conversation and no read. An append
or a rewrite changes the stamp, and the conversation is looked at again. The index is only a
hint: losing it, or two sweeps racing to write it, costs one full look, never a record.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from memhoncho.store.atomic import read_json, write_json
from memhoncho.store.layout import Layout

log = logging.getLogger(__name__)

INDEX_VERSION = 2
Stamp = list[int]  # as JSON keeps it, so a loaded index compares without conversion


def index_path(layout: Layout) -> Path:
    return layout.root / "state" / "sweep-index.json"


def file_stamp(path: Path) -> Stamp:
    """(inode, size, mtime in ns) of ``path``; zeros when it is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return [0, 0, 0]
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def outbox_stamps(layout: Layout) -> dict[str, Stamp]:
    """Every conversation with an outbox file and that file's stamp: one scan, a stat each.

    What must not change for a clean conversation to stay clean is its outbox file alone.
    """
    stamps: dict[str, Stamp] = {}
    try:
        entries = os.scandir(layout.outbox_dir)
    except FileNotFoundError:
        return stamps
    with entries:
        for entry in entries:
            if not entry.name.endswith(".jsonl"):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed since the scan began
                continue
            stamps[entry.name[: -len(".jsonl")]] = [st.st_ino, st.st_size, st.st_mtime_ns]
    return dict(sorted(stamps.items()))


def load_index(layout: Layout) -> dict[str, Stamp]:
    """The clean conversations and their stamps; empty when the index is absent or unreadable."""
    try:
        raw = read_json(index_path(layout))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        log.warning("the sweep index is unreadable; looking at every conversation")
        return {}
    if not isinstance(raw, dict) or raw.get("version") != INDEX_VERSION:
        return {}
    clean = raw.get("clean")
    # Not checked entry by entry: a malformed stamp never equals a real one, so it only costs
    # that conversation a look.
    return clean if isinstance(clean, dict) else {}


def save_index(layout: Layout, clean: dict[str, Stamp]) -> None:
    write_json(index_path(layout), {"version": INDEX_VERSION, "clean": clean})
