"""Cheap looks at an outbox file's first and last records, without the lock or a full read.

The sweep uses them to decide, per conversation, whether there is anything to deliver or to
compact before it reads a whole file. Seqs grow through the file, so the first record holds
the smallest seq and the last record the largest. A look that finds a torn or corrupt line gives
up (returns None) and the caller falls back to ``Outbox.read``, which repairs it.
Reading without the lock is safe: appends write whole lines and rewrites replace the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memhoncho.models import Record
from memhoncho.store.lines import decode_line

CHUNK_BYTES = 64 * 1024  # bytes read per step while looking for a line boundary
MAX_LINE_BYTES = 64 * 1024 * 1024  # a line longer than this is not looked at here


@dataclass(frozen=True)
class Edges:
    """The first and the last real record of an outbox file (mark lines skipped)."""

    first: Record | None  #: None when the file holds no record (only marks, or nothing)
    last: Record | None  #: the record with the largest seq; None when ``first`` is None
    size: int


class Unreadable(Exception):
    """A torn or corrupt line where the look needed a whole one."""


def edges(path: Path) -> Edges | None:
    """The edges of the outbox at ``path``; ``Edges(None, None, 0)`` if absent; None if torn."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return Edges(None, None, 0)
    try:
        size = os.fstat(fd).st_size
        first = next((r for r in _records_from_start(fd, size) if not r.get("mark")), None)
        if first is None:
            return Edges(None, None, size)
        last = next(r for r in _records_from_end(fd, size) if not r.get("mark"))
        return Edges(first, last, size)
    except (Unreadable, StopIteration):
        return None
    finally:
        os.close(fd)


def newest(path: Path) -> Record | None:
    """The newest record of the outbox at ``path`` (mark lines skipped), read from its end;
    None when it holds none. Unreadable when a torn or corrupt line stands in the way."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        return next((r for r in _records_from_end(fd, size) if not r.get("mark")), None)
    finally:
        os.close(fd)


def _records_from_start(fd: int, size: int) -> Iterator[Record]:
    offset = 0
    while offset < size:
        line = _line_at(fd, offset, size)
        yield _decode(line)
        offset += len(line)


def _records_from_end(fd: int, size: int) -> Iterator[Record]:
    end = size
    while end > 0:
        line = _line_before(fd, end)
        yield _decode(line)
        end -= len(line)


def _decode(line: bytes) -> Record:
    record = decode_line(line[:-1]) if line.endswith(b"\n") else None
    if record is None:
        raise Unreadable()
    return record


def _line_at(fd: int, offset: int, size: int) -> bytes:
    """The complete line starting at ``offset``, with its newline."""
    data = b""
    while offset + len(data) < size and len(data) < MAX_LINE_BYTES:
        chunk = os.pread(fd, CHUNK_BYTES, offset + len(data))
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline != -1:
            return data + chunk[: newline + 1]
        data += chunk
    raise Unreadable()


def _line_before(fd: int, end: int) -> bytes:
    """The complete line that ends at byte ``end`` (exclusive), with its newline."""
    if os.pread(fd, 1, end - 1) != b"\n":
        raise Unreadable()
    data = b""  # bytes [start, end) of the file
    start = end
    while start > 0 and len(data) < MAX_LINE_BYTES:
        step = min(CHUNK_BYTES, start)
        start -= step
        data = os.pread(fd, step, start) + data
        newline = data.rfind(b"\n", 0, len(data) - 1)
        if newline != -1:
            return data[newline + 1 :]
    if start == 0:
        return data
    raise Unreadable()
