"""Cheap looks at an outbox file's first and last records, without the lock or a full read.

The sweep uses them to decide, per conversation, whether there is anything to deliver or to
compact before it reads a whole file. Seqs grow through the file, so the first record holds
the smallest seq and the last line the largest. A look that finds a torn or corrupt line gives
up (returns ``UNREADABLE``) and the caller falls back to ``Outbox.read``, which repairs it.
Reading without the lock is safe: appends write whole lines and rewrites replace the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memhoncho.store.outbox import Record, decode_line

CHUNK_BYTES = 64 * 1024  # bytes read per step while looking for a line boundary
MAX_LINE_BYTES = 64 * 1024 * 1024  # a line longer than this is not looked at here


@dataclass(frozen=True)
class Edges:
    """The first real record (marks skipped) and the last line's record of an outbox file."""

    first: Record | None  #: None when the file holds no record (only marks, or nothing)
    last: Record | None  #: the last line (a record or a mark); None for an empty file
    size: int


UNREADABLE = None  # what ``edges`` answers when a full, repairing read is needed


def edges(path: Path) -> Edges | None:
    """The edges of the outbox at ``path``; ``Edges(None, None, 0)`` if absent; None if torn."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return Edges(None, None, 0)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return Edges(None, None, 0)
        last = _last_line(fd, size)
        if last is None:
            return UNREADABLE
        first: Record | None = None
        offset = 0
        while True:
            line = _line_at(fd, offset, size)
            if line is None:
                return UNREADABLE
            record = decode_line(line[:-1])
            if record is None:
                return UNREADABLE
            offset += len(line)
            if not record.get("mark"):
                first = record
                break
            if offset >= size:
                break
        return Edges(first, last, size)
    finally:
        os.close(fd)


def _line_at(fd: int, offset: int, size: int) -> bytes | None:
    """The complete line starting at ``offset`` (with its newline); None if unterminated."""
    data = b""
    while offset + len(data) < size and len(data) < MAX_LINE_BYTES:
        chunk = os.pread(fd, CHUNK_BYTES, offset + len(data))
        if not chunk:
            break
        end = chunk.find(b"\n")
        if end != -1:
            return data + chunk[: end + 1]
        data += chunk
    return None


def _last_line(fd: int, size: int) -> Record | None:
    """The record of the file's last line; None when it is torn or corrupt."""
    if os.pread(fd, 1, size - 1) != b"\n":
        return None
    data = b""  # bytes [start, size) of the file, ending with the last newline
    start = size
    while start > 0 and len(data) < MAX_LINE_BYTES:
        step = min(CHUNK_BYTES, start)
        start -= step
        data = os.pread(fd, step, start) + data
        newline = data.rfind(b"\n", 0, len(data) - 1)
        if newline != -1:
            return decode_line(data[newline + 1 : -1])
    return decode_line(data[:-1]) if start == 0 else None
