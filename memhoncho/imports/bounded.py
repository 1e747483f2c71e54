"""An export's parts read within bounds: a JSON array's elements and JSONL's lines, each at
most ``MAX_PART_BYTES`` and nested at most ``MAX_DEPTH`` deep, in bounded memory whatever the
file holds.

A hostile or broken export must cost a part, not the machine: a 40 KB file nested 20,000 deep
took 1 GB through ijson's item builder, one 128 MB string took minutes and a 4 GiB one all of
memory (a streaming parser still holds a whole string, and cannot go on after refusing one).
So the array is split here by a scanner that knows only strings, escapes and brackets (its
loops are regular expressions, in C): each element's bytes are collected while they stay
within the bounds and parsed on their own (``json.loads``); an element past a bound is skipped
to its end keeping nothing (a string too, however long) and yielded as ``Refused`` with why,
and the elements after it are read as usual. A line of JSONL is read with the same bound.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from memhoncho.errors import ImportUnreadable

MAX_PART_BYTES = 32 * 1024 * 1024  # one conversation of an array, one JSONL line
MAX_DEPTH = 64  # nesting of one part (a ChatGPT conversation nests about 8 deep)
CHUNK_BYTES = 1024 * 1024  # read at a time
SKIP_CHUNK_BYTES = 8 * 1024 * 1024  # read at a time while a line past the bound is read away

NESTED = 4  # bracket levels below the current one that one regular-expression match takes

#: a string the expression takes itself: a run of at most ``SHORT`` plain bytes between
#: escapes (keys, short values); a longer run is found with ``bytes.find`` (``_string_end``),
#: hundreds of times faster than a character class on the text of a long message
SHORT = 200
_STRING = rb'"[^"\\]{0,%d}+(?:\\.[^"\\]{0,%d}+)*+"' % (SHORT, SHORT)


def _nested(levels: int, plain: bytes) -> bytes:
    """Whole strings, runs of ``plain`` bytes, and bracket groups balanced within ``levels``
    levels, all possessive (no backtracking: a group that cannot close here is left to the
    caller, which takes its bracket alone and goes one level down)."""
    inside = rb"(?:" + _STRING + rb'|[^"\[\]{}]++)*+'
    for _ in range(levels - 1):
        inside = rb"(?:" + _STRING + rb'|[^"\[\]{}]++|[\[{]' + inside + rb"[\]}])*+"
    return rb"(?:" + _STRING + rb"|" + plain + rb"|[\[{]" + inside + rb"[\]}])*+"


#: inside an element: strings, anything but a bracket or a quote (commas included), and whole
#: bracket groups of up to ``NESTED`` levels, so a flat structure costs no loop a bracket
_INNER = re.compile(_nested(NESTED, rb'[^"\[\]{}]++'), re.S)
#: at depth 1 the commas separate the elements
_OUTER = re.compile(_nested(NESTED, rb'[^"\[\]{},]++'), re.S)
#: the same without groups, where a group of ``NESTED`` levels could pass ``MAX_DEPTH``
_INNER_FLAT = re.compile(rb"(?:" + _STRING + rb'|[^"\[\]{}]++)*+', re.S)
_OPEN, _CLOSE, _COMMA, _QUOTE = frozenset(b"[{"), frozenset(b"]}"), ord(","), ord('"')


@dataclass(frozen=True)
class Refused:
    """A part past a bound: skipped whole, nothing of it kept."""

    reason: str


class Truncated(Exception):
    """The array ends (or stops being JSON) before its closing bracket."""


def too_large() -> Refused:
    return Refused(f"larger than {MAX_PART_BYTES // (1024 * 1024)} MB; the rest is read")


def too_deep() -> Refused:
    return Refused(f"nested deeper than {MAX_DEPTH}; the rest is read")


def elements(handle: IO[bytes]) -> Iterator[bytes | Refused]:
    """The elements of the JSON array in ``handle``, each as its bytes (within the bounds) or
    ``Refused``; raises ``Truncated`` where the array ends early or is not an array."""
    scanner = _Scanner(handle)
    scanner.open_array()
    yield from scanner.run()


class _Scanner:
    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._buf = b""
        self._pos = 0
        self._depth = 1  # inside the array
        self._part: bytearray | None = bytearray()  # None while skipping
        self._why: Refused | None = None
        self._in_string = False  # skipping inside a string

    def _more(self) -> bool:
        """Keep what is not consumed, read a chunk; False at the end of the file."""
        chunk = self._handle.read(CHUNK_BYTES)
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
        return bool(chunk)

    def open_array(self) -> None:
        while True:
            rest = self._buf[self._pos :].lstrip(b" \t\r\n\xef\xbb\xbf")  # a BOM too
            if rest:
                if rest[:1] != b"[":
                    raise Truncated("not a JSON array")
                self._buf, self._pos = rest, 1
                return
            self._pos = len(self._buf)
            if not self._more():
                raise Truncated("empty")

    def _take(self, end: int) -> None:
        """Consume the buffer up to ``end``, into the part while it is collected."""
        if self._part is not None:
            self._part += self._buf[self._pos : end]
            if len(self._part) > MAX_PART_BYTES:
                self._skip(too_large())
        self._pos = end

    def _skip(self, why: Refused) -> None:
        if self._part is not None:
            self._part, self._why = None, why

    def _element(self) -> bytes | Refused | None:
        """The element just ended; None for nothing between the separators (``[]``)."""
        part, why = self._part, self._why
        self._part, self._why = bytearray(), None
        if part is None:
            return why
        stripped = bytes(part).strip()
        return stripped or None

    def _bulk(self) -> bool:
        """Take the brackets up to the next quote at once, counted, where none of them can end
        the element or pass ``MAX_DEPTH``: a file of a billion brackets costs a few counts a
        chunk, not a loop a bracket. False when they must be looked at one by one."""
        # A region shorter than the depth above the array cannot end the element, and while
        # it is collected, one shorter than the depth left to the bound cannot pass it.
        room = self._depth - 2
        if self._part is not None:
            room = min(room, MAX_DEPTH + 1 - self._depth)
        if room <= 0:
            return False
        quote = self._buf.find(b'"', self._pos, self._pos + room)
        stop = quote if quote >= 0 else min(len(self._buf), self._pos + room)
        if stop == self._pos:
            return False
        region = self._buf[self._pos : stop]
        opens = region.count(b"[") + region.count(b"{")
        self._depth += opens - region.count(b"]") - region.count(b"}")
        self._take(stop)
        if stop >= len(self._buf) and not self._more():
            raise Truncated("ends before its closing bracket")
        return True

    def run(self) -> Iterator[bytes | Refused]:
        while True:
            if self._in_string:
                end = _string_end(self._buf, self._pos)
                if end is not None:
                    self._pos, self._in_string = end, False
                    continue
                self._pos = len(self._buf) - _odd_backslashes(self._buf)  # keep an escape
                if not self._more():
                    raise Truncated("ends inside a string")
                continue
            if self._bulk():
                continue
            if self._depth == 1:
                pattern = _OUTER
            elif self._part is None or self._depth + NESTED <= MAX_DEPTH + 1:
                pattern = _INNER
            else:
                pattern = _INNER_FLAT
            end = pattern.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            self._take(end)
            if end >= len(self._buf):
                if not self._more():
                    raise Truncated("ends before its closing bracket")
                continue
            byte = self._buf[end]
            if byte == _QUOTE:  # a long string, or one the buffer does not hold whole yet
                closed = _string_end(self._buf, end + 1)
                if closed is not None:
                    self._take(closed)
                    continue
                if self._part is not None and (
                    len(self._part) + len(self._buf) - end > MAX_PART_BYTES
                ):
                    self._skip(too_large())  # a string past the bound: never held whole
                if self._part is None:
                    self._pos, self._in_string = end + 1, True
                elif not self._more():
                    raise Truncated("ends inside a string")
                continue
            if byte in _OPEN:
                self._depth += 1
                if self._depth - 1 > MAX_DEPTH:
                    self._skip(too_deep())
                self._take(end + 1)
            elif byte in _CLOSE:
                self._depth -= 1
                if self._depth == 0:  # the array's own closing bracket
                    self._pos = end + 1
                    last = self._element()
                    if last is not None:
                        yield last
                    return
                self._take(end + 1)
            elif byte == _COMMA:  # depth 1: the element ends
                self._pos = end + 1
                found = self._element()
                yield found if found is not None else Refused("an empty element")


def _string_end(buf: bytes, start: int) -> int | None:
    """Where the string whose text begins at ``start`` ends (after its closing quote); None
    when ``buf`` does not hold its end."""
    at = start
    while (quote := buf.find(b'"', at)) >= 0:
        if _backslashes_before(buf, quote, start) % 2 == 0:
            return quote + 1
        at = quote + 1
    return None


def _backslashes_before(buf: bytes, end: int, start: int) -> int:
    """The run of backslashes just before ``end`` (not before ``start``), 64 at a time."""
    run_start = end
    while run_start > start:
        window = buf[max(start, run_start - 64) : run_start]
        kept = len(window.rstrip(b"\\"))
        run_start -= len(window) - kept
        if kept:
            break
    return end - run_start


def _odd_backslashes(buf: bytes) -> int:
    """1 when ``buf`` ends in an escape not yet complete (an odd run of backslashes)."""
    return (len(buf) - len(buf.rstrip(b"\\"))) % 2


def lines(handle: IO[bytes]) -> Iterator[bytes | Refused]:
    """The lines of ``handle`` (a last one without its newline too), a line past
    ``MAX_PART_BYTES`` read away in chunks and yielded as ``Refused``."""
    for line in _split(handle, CHUNK_BYTES, last=True):
        yield line if isinstance(line, bytes) else too_large()


def whole_lines(handle: IO[bytes], chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes | Skipped]:
    """The file's lines from the handle's position, each ending in a newline; a last line
    still being written (no newline yet) is not yielded. A line past ``MAX_PART_BYTES`` is
    read away without being kept and yielded as its length (``Skipped``): the offsets stay
    right, memory stays bounded."""
    return _split(handle, chunk_bytes, last=False)


def _split(handle: IO[bytes], chunk_bytes: int, *, last: bool) -> Iterator[bytes | Skipped]:
    rest = b""
    skipped = 0  # bytes of a too long line read away so far
    while chunk := handle.read(SKIP_CHUNK_BYTES if skipped else chunk_bytes):
        if skipped:
            end = chunk.find(b"\n")
            if end < 0:
                skipped += len(chunk)
                continue
            yield Skipped(skipped + end + 1)
            skipped, chunk = 0, chunk[end + 1 :]
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
        if len(rest) > MAX_PART_BYTES:
            skipped, rest = len(rest), b""
    if last and skipped:
        yield Skipped(skipped)
    elif last and rest:
        yield rest


class Skipped(int):
    """A line too long to read, by its length (``len`` works as on the line itself)."""

    def __len__(self) -> int:
        return int(self)


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened to read, when it is a regular file: a FIFO (opened without blocking,
    so no writer is waited for), a device such as ``/dev/zero`` or a folder is refused with
    ``ImportUnreadable`` before anything is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ImportUnreadable(f"{path} cannot be read: {type(exc).__name__}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ImportUnreadable(f"{path} is not a regular file", path=os.fspath(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
