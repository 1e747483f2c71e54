"""The outbox: one append-only JSON-lines file per conversation, the only durable copy of
undelivered content.

A line is ``<crc32 as 8 hex digits> <record JSON>\\n``. Every record has a ``seq`` that grows
within the conversation; the ledger's ``delivered_seq`` says how far delivery has come, so
"pending" is ``seq > delivered_seq`` and compaction can drop the delivered prefix. When
compaction drops every record it leaves a mark line (``{"seq": N, "mark": true}``) so ``seq``
never goes back.

All reads and writes take the conversation's outbox lock, so an unterminated tail seen under
the lock was left by a writer that died: it is moved to quarantine, and so is a complete line
whose checksum or JSON is wrong. Neither hides the good lines around it.
"""

from __future__ import annotations

import base64
import bisect
import json
import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memhoncho.errors import OutboxCapacity, StoreError
from memhoncho.store.atomic import append_durably, fsync_dir, write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.locks import file_lock

log = logging.getLogger(__name__)

Record = dict[str, Any]


def encode_line(record: Record) -> bytes:
    """One outbox line: checksum, space, compact JSON, newline."""
    payload = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode_line(line: bytes) -> Record | None:
    """The record of one complete line (without its newline), or None if it is corrupt."""
    if len(line) < 10 or line[8:9] != b" ":
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
    return record


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
    parsed = Parsed()
    end = data.rfind(b"\n") + 1
    parsed.torn = data[end:]
    for raw in data[:end].split(b"\n")[:-1]:
        record = decode_line(raw)
        if record is None:
            parsed.corrupt.append(raw)
        else:
            parsed.lines.append((record, raw + b"\n"))
    return parsed


@dataclass
class _Tail:
    """What this process knows of one outbox file, so an append reads only new bytes."""

    dev: int
    ino: int
    size: int
    last_seq: int
    seqs: list[int]
    batch_ids: set[str]


@dataclass(frozen=True)
class Appended:
    duplicate: bool
    seq: int | None = None


class Outbox:
    """Appends, reads and rewrites of the outbox files under one data directory."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._tails: dict[str, _Tail] = {}

    # ---- append (the capture hot path) -------------------------------------------------

    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        delivered_seq: Callable[[], int],
        delivered_before: Callable[[str], bool],
    ) -> Appended:
        """Append ``record`` (a ``seq`` is assigned) and fsync, unless its batch is known.

        ``delivered_seq`` and ``delivered_before`` read the ledger; they are called only when
        needed. Raises OutboxCapacity when the conversation already has ``max_pending``
        undelivered batches.
        """
        path = self.layout.outbox(key)
        with file_lock(self.layout.outbox_lock(key)):
            existed = path.exists()
            if not existed:
                path.parent.mkdir(parents=True, exist_ok=True)
            else:
                self._recover_if_needed(key)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                tail = self._tail(key, fd)
                batch_id = record["batch_id"]
                if batch_id in tail.batch_ids or delivered_before(batch_id):
                    return Appended(duplicate=True)
                floor = 0
                if len(tail.seqs) >= max_pending or not tail.seqs:
                    floor = delivered_seq()
                    pending = len(tail.seqs) - bisect.bisect_right(tail.seqs, floor)
                    if pending >= max_pending:
                        raise OutboxCapacity(
                            f"the conversation has {pending} undelivered batches; "
                            f"the limit is {max_pending}",
                            limit=max_pending,
                        )
                seq = max(tail.last_seq + 1, floor + 1, time.time_ns() // 1000)
                line = encode_line({**record, "seq": seq})
                self._write_all(fd, line, tail.size)
                tail.size += len(line)
                tail.last_seq = seq
                tail.seqs.append(seq)
                tail.batch_ids.add(batch_id)
            finally:
                os.close(fd)
            if not existed:
                fsync_dir(path.parent)
        return Appended(duplicate=False, seq=seq)

    @staticmethod
    def _write_all(fd: int, data: bytes, size_before: int) -> None:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            # Leave no partial line behind: the caller is told nothing was accepted.
            try:
                os.ftruncate(fd, size_before)
                os.fsync(fd)
            except OSError:
                pass
            raise StoreError(f"could not append to the outbox ({exc.strerror})") from None

    def _tail(self, key: str, fd: int) -> _Tail:
        st = os.fstat(fd)
        tail = self._tails.get(key)
        if tail is None or (tail.dev, tail.ino) != (st.st_dev, st.st_ino) or st.st_size < tail.size:
            tail = _Tail(st.st_dev, st.st_ino, 0, 0, [], set())
            self._tails[key] = tail
        if st.st_size > tail.size:
            parsed = parse(os.pread(fd, st.st_size - tail.size, tail.size))
            # _recover_if_needed ran under this lock, so the new bytes are whole, good lines.
            for record, raw in parsed.lines:
                tail.size += len(raw)
                tail.last_seq = record["seq"]
                if not record.get("mark"):
                    tail.seqs.append(record["seq"])
                    tail.batch_ids.add(record["batch_id"])
        return tail

    def _recover_if_needed(self, key: str) -> None:
        """Quarantine a torn tail or corrupt lines; cheap when the file ends in a good line."""
        path = self.layout.outbox(key)
        tail = self._tails.get(key)
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        if tail is not None and (tail.dev, tail.ino, tail.size) == (
            st.st_dev,
            st.st_ino,
            st.st_size,
        ):
            return
        with open(path, "rb") as handle:
            start = tail.size if tail and (tail.dev, tail.ino) == (st.st_dev, st.st_ino) else 0
            start = min(start, st.st_size)
            handle.seek(start)
            fresh = handle.read()
        if fresh.endswith(b"\n") or not fresh:
            parsed = parse(fresh)
            if not parsed.corrupt:
                return
        self._read_locked(key)  # rewrites the file without the bad lines

    # ---- reads and rewrites (delivery, sweep, status) ----------------------------------

    def read(self, key: str) -> Parsed:
        """Every good line of the outbox, after quarantining bad ones."""
        with file_lock(self.layout.outbox_lock(key)):
            return self._read_locked(key)

    def pending(self, key: str, after_seq: int) -> list[Record]:
        """The records with ``seq > after_seq``, in capture order."""
        return [r for r in self.read(key).records if r["seq"] > after_seq]

    def _read_locked(self, key: str) -> Parsed:
        path = self.layout.outbox(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return Parsed()
        parsed = parse(data)
        if parsed.corrupt or parsed.torn:
            self._quarantine(key, parsed.corrupt, "corrupt")
            if parsed.torn:
                self._quarantine(key, [parsed.torn], "torn")
            write_bytes(path, b"".join(raw for _, raw in parsed.lines))
            self._tails.pop(key, None)
            log.warning(
                "outbox lines quarantined",
                extra={
                    "action": "outbox_quarantined",
                    "conversation_key": key,
                    "corrupt": len(parsed.corrupt),
                    "torn": bool(parsed.torn),
                },
            )
            parsed = Parsed(lines=parsed.lines)
        return parsed

    def _quarantine(self, key: str, raws: Iterable[bytes], reason: str) -> None:
        entries = [
            json.dumps(
                {"reason": reason, "at": time.time(), "raw_b64": base64.b64encode(raw).decode()}
            ).encode()
            + b"\n"
            for raw in raws
        ]
        if entries:
            append_durably(self.layout.quarantine(key), b"".join(entries))

    def rewrite(
        self,
        key: str,
        keep: Callable[[Record], bool],
        before_replace: Callable[[list[Record]], None] | None = None,
    ) -> tuple[list[Record], list[Record]]:
        """Keep the records ``keep`` accepts; return (kept, dropped).

        ``before_replace(dropped)`` runs before the new file replaces the old, so a crash in
        between leaves a record in both places, never in neither.
        """
        with file_lock(self.layout.outbox_lock(key)):
            parsed = self._read_locked(key)
            kept_lines = [(r, raw) for r, raw in parsed.lines if r.get("mark") or keep(r)]
            dropped = [r for r, _ in parsed.lines if not r.get("mark") and not keep(r)]
            if not dropped:
                return parsed.records, []
            if before_replace is not None:
                before_replace(dropped)
            # Only the newest mark matters, and only when no record follows it.
            body = [(r, raw) for r, raw in kept_lines if not r.get("mark")]
            if not body or body[-1][0]["seq"] < parsed.last_seq:
                body.append(({"seq": parsed.last_seq, "mark": True}, b""))
            data = b"".join(raw or encode_line(r) for r, raw in body)
            write_bytes(self.layout.outbox(key), data)
            self._tails.pop(key, None)
            return [r for r, _ in body if not r.get("mark")], dropped

    def remove(self, key: str) -> None:
        """Delete a conversation's outbox (operator purge only)."""
        with file_lock(self.layout.outbox_lock(key)):
            try:
                self.layout.outbox(key).unlink()
            except FileNotFoundError:
                return
            self._tails.pop(key, None)
            fsync_dir(self.layout.outbox_dir)
