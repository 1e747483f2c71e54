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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from memhoncho.errors import CaptureTooLarge, OutboxCapacity, RunConflict, StoreError
from memhoncho.models import Record
from memhoncho.store.atomic import append_durably, fsync_dir, refused_as_store_error, write_bytes
from memhoncho.store.base import BeforeReplace
from memhoncho.store.layout import Layout
from memhoncho.store.lines import Parsed, encode_line, parse
from memhoncho.store.locks import file_lock
from memhoncho.store.modes import make_dirs, open_file, trusted_owner

log = logging.getLogger(__name__)


TAIL_CHECK_BYTES = 64  # bytes of the file's end a cached tail re-reads to prove it is current


@dataclass
class _Tail:
    """What this process knows of one outbox file, so an append reads only new bytes."""

    dev: int
    ino: int
    size: int
    last_seq: int
    seqs: list[int]
    batch_ids: dict[str, str | None]  # batch id -> its content digest (None on older lines)
    end: bytes = b""  # the file's last bytes up to ``size``; they hold the last line's seq

    def matches(self, fd: int, st: os.stat_result) -> bool:
        """Still the file this was built from (inode numbers are reused after a rewrite)."""
        if (self.dev, self.ino) != (st.st_dev, st.st_ino) or st.st_size < self.size:
            return False
        return not self.end or os.pread(fd, len(self.end), self.size - len(self.end)) == self.end

    def advance(self, lines: list[tuple[Record, bytes]]) -> None:
        for record, raw in lines:
            self.size += len(raw)
            self.last_seq = record["seq"]
            if not record.get("mark"):
                self.seqs.append(record["seq"])
                self.batch_ids[record["batch_id"]] = record.get("digest")
        newest = b""
        for _, raw in reversed(lines):
            newest = raw + newest
            if len(newest) >= TAIL_CHECK_BYTES:
                break
        else:
            newest = self.end + newest
        self.end = newest[-TAIL_CHECK_BYTES:]


@dataclass(frozen=True)
class Appended:
    duplicate: bool
    seq: int | None = None


_APPEND_FLAGS = os.O_RDWR | os.O_APPEND


def _open_for_append(path: Path) -> tuple[int, bool]:
    """An append descriptor, and whether this call created the file (its dir needs an fsync)."""
    with refused_as_store_error(path):  # a new conversation's file can meet a full disk
        return _open_or_create(path)


def _open_or_create(path: Path) -> tuple[int, bool]:
    try:
        return os.open(path, _APPEND_FLAGS), False
    except FileNotFoundError:
        pass
    make_dirs(path.parent)
    try:
        return open_file(path, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL), True
    except FileExistsError:
        return os.open(path, _APPEND_FLAGS), False


def _too_large(size: int, limit: int) -> CaptureTooLarge:
    return CaptureTooLarge(f"the run is {size} bytes; the limit is {limit} bytes", limit=limit)


def run_conflict(known_digest: str | None, record: Record) -> RunConflict | None:
    """RunConflict when the batch already captured holds other content than ``record``; the
    PostgreSQL store asks the same question, so both refuse a run id alike."""
    digest = record.get("digest")
    if known_digest is not None and digest is not None and known_digest != digest:
        return RunConflict(
            "the run id was already captured in this conversation with other content; "
            "nothing was written",
            batch_id=record["batch_id"],
        )
    return None


def _check_same_content(known_digest: str | None, record: Record) -> None:
    conflict = run_conflict(known_digest, record)
    if conflict is not None:
        raise conflict


class Outbox:
    """Appends, reads and rewrites of the outbox files under one data directory."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._tails: dict[str, _Tail] = {}
        self._paths: dict[str, tuple[Path, Path]] = {}  # key -> (outbox, its lock)

    def _files(self, key: str) -> tuple[Path, Path]:
        """The outbox file and its lock; built once per key (pathlib is slow on the hot path)."""
        paths = self._paths.get(key)
        if paths is None:
            paths = self._paths[key] = (self.layout.outbox(key), self.layout.outbox_lock(key))
        return paths

    # ---- append (the capture hot path) -------------------------------------------------

    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        delivered_seq: Callable[[], int],
        delivered_before: Callable[[str], bool],
        delivered_digest: Callable[[str], str | None] | None = None,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> Appended:
        """Append ``record`` (a ``seq`` is assigned) and fsync, unless its batch is known.

        ``delivered_seq``, ``delivered_before`` and ``delivered_digest`` (the content digest the
        ledger kept for a delivered batch) read the ledger; they are called only when needed.
        A known batch whose ``digest`` differs from the record's raises RunConflict; the same
        digest (or one side without a digest, as written before digests) is a duplicate.
        Raises OutboxCapacity when the conversation already has ``max_pending`` undelivered
        batches, CaptureTooLarge when the line would exceed ``max_bytes``. ``after_write`` runs
        once the line is written, before its fsync, under the lock.
        """
        # Encoded before the lock with the seq it will almost always get (the clock), so a
        # run over the ceiling is refused without creating the lock file or the outbox.
        seq_guess = time.time_ns() // 1000
        line = encode_line({**record, "seq": seq_guess})
        if max_bytes is not None and len(line) > max_bytes:
            raise _too_large(len(line), max_bytes)
        path, lock = self._files(key)
        with file_lock(lock):
            fd, created = _open_for_append(path)
            wrote = False
            try:
                tail = self._current_tail(key, fd)
                if tail is None:  # the file was repaired: append to the new one
                    os.close(fd)
                    fd = -1
                    fd, _ = _open_for_append(path)
                    tail = self._current_tail(key, fd)
                    if tail is None:
                        raise StoreError("the outbox changed while it was being repaired")
                batch_id = record["batch_id"]
                if batch_id in tail.batch_ids:
                    _check_same_content(tail.batch_ids[batch_id], record)
                    return Appended(duplicate=True)
                if delivered_before(batch_id):
                    if delivered_digest is not None:
                        _check_same_content(delivered_digest(batch_id), record)
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
                seq = max(tail.last_seq + 1, floor + 1, seq_guess)
                stored: Record = {**record, "seq": seq}
                if seq != seq_guess:  # the clock went back, or two appends in one microsecond
                    line = encode_line(stored)
                    if max_bytes is not None and len(line) > max_bytes:
                        raise _too_large(len(line), max_bytes)
                self._write_all(fd, line, tail.size, after_write)
                wrote = True
                tail.advance([(stored, line)])
            finally:
                if fd >= 0:
                    os.close(fd)
                if created and not wrote:  # refused: leave no empty file behind either
                    path.unlink(missing_ok=True)
                    self._tails.pop(key, None)
            if created:
                fsync_dir(path.parent)
        return Appended(duplicate=False, seq=seq)

    @staticmethod
    def _write_all(
        fd: int, data: bytes, size_before: int, after_write: Callable[[], object] | None = None
    ) -> None:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if after_write is not None:
                try:
                    after_write()
                except Exception as exc:  # a hook never stands between a line and its fsync
                    log.warning(
                        "after-write hook failed",
                        extra={"action": "after_write_failed", "error": type(exc).__name__},
                    )
            os.fsync(fd)
        except OSError as exc:
            # Leave no partial line behind: the caller is told nothing was accepted.
            try:
                os.ftruncate(fd, size_before)
                os.fsync(fd)
            except OSError:
                pass
            raise StoreError(f"could not append to the outbox ({exc.strerror})") from None

    def _current_tail(self, key: str, fd: int) -> _Tail | None:
        """The tail of the file open at ``fd``, caught up; called under the outbox lock.

        Bytes this process has not seen are parsed. If they end torn or hold a corrupt line (a
        writer died, or the disk lied) the file is repaired and None returned: the caller
        reopens it, so the next line is never glued onto a torn one.
        """
        st = os.fstat(fd)
        tail = self._tails.get(key)
        if tail is None or not tail.matches(fd, st):
            tail = _Tail(st.st_dev, st.st_ino, 0, 0, [], {})
            self._tails.pop(key, None)
        if st.st_size > tail.size:
            parsed = parse(os.pread(fd, st.st_size - tail.size, tail.size))
            if parsed.corrupt or parsed.torn:
                self._read_locked(key)  # quarantines and rewrites the file without them
                return None
            tail.advance(parsed.lines)
        self._tails[key] = tail
        return tail

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
            with open(path, "rb") as handle:
                owner = os.fstat(handle.fileno()).st_uid
                if not trusted_owner(owner, self.layout.root):
                    return self._set_aside_foreign(key, path, owner)
                data = handle.read()
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

    def _set_aside_foreign(self, key: str, path: Path, owner: int) -> Parsed:
        """An outbox file the deployment did not write (another user's: ``modes.trusted_owner``)
        is never read, let alone delivered as the owner's turns: it moves, unread, to the
        quarantine folder (``<key>.foreign-<time>.jsonl``) with a warning."""
        make_dirs(self.layout.quarantine_dir)
        aside = self.layout.quarantine_dir / f"{key}.foreign-{time.time_ns()}.jsonl"
        with refused_as_store_error(path):
            os.replace(path, aside)
            fsync_dir(path.parent)
        self._tails.pop(key, None)
        log.warning(
            "an outbox file another user wrote was set aside, unread",
            extra={"action": "outbox_foreign", "conversation_key": key, "uid": owner},
        )
        return Parsed()

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
        self, key: str, keep: Callable[[Record], bool], before_replace: BeforeReplace | None = None
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
