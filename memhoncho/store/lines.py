"""The outbox's line format, shared by the dead letters: ``<crc32 as 8 hex digits> <JSON>\\n``.

Decoding never raises: a line whose checksum or JSON is wrong is reported corrupt, a tail
without its newline is reported torn, and what to do with them is the caller's (quarantine).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from memhoncho.models import Record


def encode_line(record: Mapping[str, object]) -> bytes:
    """One outbox line: checksum, space, compact JSON, newline."""
    payload = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


_HEX = b"0123456789abcdef"


def decode_line(line: bytes) -> Record | None:
    """The record of one complete line (without its newline), or None if it is corrupt."""
    # Exactly 8 lowercase hex digits: int() alone would also take " 1234567" or "+1234567".
    if len(line) < 10 or line[8:9] != b" " or line[:8].translate(None, _HEX):
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
        return None
    return cast(Record, record)


@dataclass
class Parsed:
    """The lines of an outbox file, split into good and bad, in file order."""

    lines: list[tuple[Record, bytes]] = field(default_factory=list)  # good (record, raw line)
    corrupt: list[bytes] = field(default_factory=list)
    torn: bytes = b""  # an unterminated tail

    @property
    def records(self) -> list[Record]:
        return [record for record, _ in self.lines if not record.get("mark")]

    @property
    def last_seq(self) -> int:
        return self.lines[-1][0]["seq"] if self.lines else 0


def parse(data: bytes) -> Parsed:
    """Split ``data`` into good lines, corrupt lines and an unterminated tail."""
    parsed = Parsed()
    end = data.rfind(b"\n") + 1
    parsed.torn = data[end:]
    for raw in data[:end].split(b"\n")[:-1]:
        record = decode_line(raw)
        if record is not None:
            parsed.lines.append((record, raw + b"\n"))
            continue
        parsed.corrupt.append(raw)
        parsed.lines.extend(_resync(raw))
    return parsed


def _resync(raw: bytes) -> list[tuple[Record, bytes]]:
    """Good lines inside a corrupt one whose newline was damaged (two lines run together).

    The corrupt raw line itself still goes to quarantine, as evidence; the records found whole
    inside it are kept, so one damaged byte never takes two records out. Only a real line
    boundary can match: a record's JSON never holds an unescaped ``HHHHHHHH {`` that decodes.
    """
    found: list[tuple[Record, bytes]] = []
    start = 0
    brace = raw.find(b" {", 9)
    while brace != -1:
        line_start = brace - 8  # 8 hex digits, then " {"
        damaged = line_start - 1  # where the newline was
        if damaged > start and (record := decode_line(raw[start:damaged])) is not None:
            found.append((record, raw[start:damaged] + b"\n"))
            start = line_start
        brace = raw.find(b" {", brace + 2)
    if found and (record := decode_line(raw[start:])) is not None:
        found.append((record, raw[start:] + b"\n"))
    return found
