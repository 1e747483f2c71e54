"""Dead letters: ``data/dead/<conversation>.jsonl``, records retention took out of the outbox.

Lines use the outbox's format (checksum, space, JSON), so ``lines.parse`` reads them and a
torn or corrupt line never hides the good ones. Each record keeps every field it had in the
outbox plus ``dead_at`` and ``dead_reason``. The dead-letter lock serializes the sweep's
appends and replay's removals of one file; neither is ever held across a network call.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import cast

from memhoncho.models import Record
from memhoncho.store.atomic import append_durably, fsync_dir, write_bytes
from memhoncho.store.layout import Layout, keys_in
from memhoncho.store.lines import encode_line, parse
from memhoncho.store.locks import file_lock

DEAD_FIELDS = ("dead_at", "dead_reason")  # added when a record dies, removed on replay
OUTBOX_ONLY_FIELDS = ("seq",)  # assigned again by the outbox on replay


@contextmanager
def dead_lock(layout: Layout, key: str) -> Iterator[None]:
    with file_lock(layout.lock_dir / f"{key}.dead.lock"):
        yield


def append_dead(layout: Layout, key: str, records: Iterable[Record], reason: str) -> int:
    """Write ``records`` to the conversation's dead-letter file durably; how many were written.

    Call it with ``dead_lock`` held.
    """
    now = time.time()
    lines = [encode_line({**r, "dead_at": now, "dead_reason": reason}) for r in records]
    if lines:
        append_durably(layout.dead(key), b"".join(lines))
    return len(lines)


def read_dead(layout: Layout, key: str) -> list[Record]:
    """The good dead letters of a conversation, in file order; bad lines are quarantined."""
    try:
        data = layout.dead(key).read_bytes()
    except FileNotFoundError:
        return []
    parsed = parse(data)
    bad = [*parsed.corrupt, *([parsed.torn] if parsed.torn else [])]
    if bad:
        _quarantine(layout, key, bad)
        write_bytes(layout.dead(key), b"".join(raw for _, raw in parsed.lines))
    return [record for record, _ in parsed.lines]


def replace_dead(layout: Layout, key: str, remaining: list[Record]) -> None:
    """Leave only ``remaining`` in the dead-letter file (atomically); remove it when empty."""
    path = layout.dead(key)
    if remaining:
        write_bytes(path, b"".join(encode_line(r) for r in remaining))
        return
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def dead_keys(layout: Layout) -> list[str]:
    """Every conversation key with a dead-letter file, sorted."""
    return keys_in(layout.dead_dir, ".jsonl")


def revived(record: Record, now: float) -> Record:
    """The record as it goes back into the outbox: no seq, no dead fields, ``replayed_at``."""
    drop = (*DEAD_FIELDS, *OUTBOX_ONLY_FIELDS)
    kept = cast(Record, {k: v for k, v in record.items() if k not in drop})
    return {**kept, "replayed_at": now}


def _quarantine(layout: Layout, key: str, raws: list[bytes]) -> None:
    entries = [
        json.dumps(
            {
                "reason": "dead-letter-corrupt",
                "at": time.time(),
                "raw_b64": base64.b64encode(raw).decode(),
            }
        ).encode()
        + b"\n"
        for raw in raws
    ]
    append_durably(layout.quarantine(key), b"".join(entries))
