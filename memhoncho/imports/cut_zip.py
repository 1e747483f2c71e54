"""A zip cut short (a download that stopped): its entries read from their local headers.

A zip's table of contents (the central directory) is at its end, so ``zipfile`` cannot open one
that lost its tail. Each entry also starts with a local header naming it, so the entries before
the cut can still be read in order. The entry the cut falls in reads up to the cut and then
raises ``EOFError``, which the import reports as where the export breaks, as it does for a
``conversations.json`` cut short: what came before is imported, and a rerun on the whole
download stores only the rest.

Only what an export needs is read: stored and deflated entries, sizes in the header or in a
data descriptor after the data (a zip written as a stream), ZIP64 sizes.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, cast

LOCAL_SIGNATURE = b"PK\x03\x04"
DESCRIPTOR_SIGNATURE = b"PK\x07\x08"
#: signature, version, flags, method, time, date, crc, compressed size, size, name and extra lengths
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
STORED, DEFLATED = 0, 8
HAS_DESCRIPTOR = 0x08  # the sizes follow the data (the header's are 0)
UTF8_NAME = 0x800
ZIP64_EXTRA = 0x0001
ZIP64_MARK = 0xFFFFFFFF
CHUNK = 1 << 16


@dataclass(frozen=True)
class Entry:
    name: str
    method: int
    flags: int
    compressed_size: int | None  # None: known only from the data descriptor after the data
    zip64: bool


def find(handle: IO[bytes], wanted: Callable[[str], bool]) -> IO[bytes] | None:
    """The first entry whose name ``wanted``, as a stream of its bytes (``EOFError`` where the
    zip is cut, ``zipfile.BadZipFile`` where it is corrupt); None when the entries before the
    cut hold none. ``handle`` must be seekable (a file)."""
    while True:
        entry = _next_entry(handle)
        if entry is None:
            return None
        if wanted(entry.name):
            # Unbuffered: a buffered read would drop the bytes before the cut with its EOFError.
            return cast(IO[bytes], _EntryStream(handle, entry))
        try:
            _skip(handle, entry)
        except (EOFError, zipfile.BadZipFile):
            return None


def _next_entry(handle: IO[bytes]) -> Entry | None:
    """The local header at the handle's position; None at the central directory or the cut."""
    header = handle.read(LOCAL_HEADER.size)
    if len(header) < LOCAL_HEADER.size or not header.startswith(LOCAL_SIGNATURE):
        return None
    _, _, flags, method, _, _, _, compressed, size, name_length, extra_length = LOCAL_HEADER.unpack(
        header
    )
    raw_name, extra = handle.read(name_length), handle.read(extra_length)
    if len(raw_name) < name_length or len(extra) < extra_length:
        return None
    name = raw_name.decode("utf-8" if flags & UTF8_NAME else "cp437", errors="replace")
    zip64 = _has_zip64(extra)
    if zip64 and compressed == ZIP64_MARK:
        compressed = _zip64_compressed_size(extra, size == ZIP64_MARK)
    known = None if flags & HAS_DESCRIPTOR else compressed  # the header's sizes are 0 then
    return Entry(name, method, flags, known, zip64)


def _extra_fields(extra: bytes) -> dict[int, bytes]:
    fields, at = {}, 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        fields[kind] = extra[at + 4 : at + 4 + length]
        at += 4 + length
    return fields


def _has_zip64(extra: bytes) -> bool:
    return ZIP64_EXTRA in _extra_fields(extra)


def _zip64_compressed_size(extra: bytes, size_first: bool) -> int:
    """The ZIP64 field holds the 8-byte sizes whose header field is 0xFFFFFFFF, size first."""
    field = _extra_fields(extra)[ZIP64_EXTRA]
    at = 8 if size_first else 0
    if len(field) < at + 8:
        raise zipfile.BadZipFile("a ZIP64 field without its compressed size")
    return int(struct.unpack_from("<Q", field, at)[0])


def _skip(handle: IO[bytes], entry: Entry) -> None:
    """Past the entry's data and its data descriptor, to the next local header."""
    if entry.compressed_size is not None:
        if handle.seek(entry.compressed_size, io.SEEK_CUR) > _size(handle):
            raise EOFError("the zip ends inside an entry")
    else:  # its size in the descriptor after it: a deflated stream says where it ends
        stream = _EntryStream(handle, entry)
        while stream.read(CHUNK):
            pass
    if entry.flags & HAS_DESCRIPTOR:
        _skip_descriptor(handle, entry.zip64)


def _skip_descriptor(handle: IO[bytes], zip64: bool) -> None:
    """CRC and both sizes (8 bytes each with ZIP64), after an optional signature."""
    sizes = 16 if zip64 else 8
    first = handle.read(4)
    rest = handle.read(4 + sizes if first == DESCRIPTOR_SIGNATURE else sizes)
    if len(first) < 4 or len(rest) < (4 + sizes if first == DESCRIPTOR_SIGNATURE else sizes):
        raise EOFError("the zip ends inside a data descriptor")


def _size(handle: IO[bytes]) -> int:
    at = handle.tell()
    end = handle.seek(0, io.SEEK_END)
    handle.seek(at)
    return end


class _EntryStream(io.RawIOBase):
    """One entry's bytes, decompressed as they are read, from the handle's position: each read
    answers what is ready (a short read), so the bytes before a cut are all handed over before
    the read that meets the cut raises."""

    def __init__(self, handle: IO[bytes], entry: Entry) -> None:
        if entry.method not in (STORED, DEFLATED):
            raise zipfile.BadZipFile(f"{entry.name}: compression method {entry.method}")
        if entry.method == STORED and entry.compressed_size is None:
            raise zipfile.BadZipFile(f"{entry.name}: stored without a size")
        self._handle, self._entry = handle, entry
        self._left = entry.compressed_size  # raw bytes of the entry still to read, if known
        self._inflate = zlib.decompressobj(-zlib.MAX_WBITS) if entry.method == DEFLATED else None
        self._out = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._out and not self._done:
            self._out = self._next_chunk()
        count = min(len(buffer), len(self._out))
        buffer[:count] = self._out[:count]
        self._out = self._out[count:]
        return count

    def _raw(self) -> bytes:
        want = CHUNK if self._left is None else min(CHUNK, self._left)
        data = self._handle.read(want) if want else b""
        if not data:
            raise EOFError(f"the zip ends inside {self._entry.name}")
        if self._left is not None:
            self._left -= len(data)
        return data

    def _next_chunk(self) -> bytes:
        if self._inflate is None:  # stored
            if self._left == 0:
                self._done = True
                return b""
            return self._raw()
        data = self._inflate.unconsumed_tail or self._raw()
        try:
            out = self._inflate.decompress(data, CHUNK)
        except zlib.error as exc:
            raise zipfile.BadZipFile(f"{self._entry.name} is corrupt ({exc})") from None
        if self._inflate.eof:
            self._done = True
            # What lies past the stream (a descriptor, the next header) is read again from there.
            self._handle.seek(-len(self._inflate.unused_data), io.SEEK_CUR)
        return out
