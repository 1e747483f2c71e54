"""A cheap, read-only census of the store for the status view.

One row per conversation holds what its outbox and ledger said when last read (pending
batches and messages, the oldest pending capture, session, last delivery, and the open send
and newest failure the workers' watchdog bounds by: ``pending``, ``store/stranded.py``) and
the stat they were read under. A read lists the two directories, stats each outbox (captures
append in place, so only the size and mtime show them) and reads a file again only when it
changed.
Ledgers are only ever replaced (atomic writes), so a changed ledger shows a new inode in the
directory listing, which costs no stat; a ledger is also stat-ed whenever its conversation has
pending work or its outbox changed. Rows are kept in ``cache/status-summary.bin`` (columns of
fixed-width numbers: a one-shot ``memhoncho status`` loads it in milliseconds); it is
disposable and rebuilt when missing or unreadable.

Nothing here takes a lock or repairs a file (the outbox does that under its lock). An
unterminated tail seen without the lock may be an append in progress, so it is not counted.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memhoncho.models import Ledger
from memhoncho.store import census_file as summary_file
from memhoncho.store.atomic import write_bytes
from memhoncho.store.base import Census, Pending
from memhoncho.store.census_listing import count_lines, list_inodes, list_stats, open_dir, reason
from memhoncho.store.layout import Layout
from memhoncho.store.lines import parse

# Integer columns of a row, then float columns (NaN means "none").
INT_COLUMNS = (
    "o_ino", "o_size", "o_mtime", "o_state",  # outbox stat; state: 0 absent, 1 read, 2 unreadable
    "l_ino", "l_size", "l_mtime", "l_state",  # ledger stat; state: 0 absent, 1 read, 2 bad
    "delivered_seq", "has_session", "pending_batches", "pending_messages", "corrupt_lines",
)  # fmt: skip
# The ledger's open send (``in_flight_since``; inf when open since an unknown time) and its
# newest failure (``last_error.at`` while ``failures``): what ``store/stranded.py`` bounds by.
FLOAT_COLUMNS = ("oldest_pending_at", "last_delivered_at", "in_flight_since", "failed_at")
(O_INO, O_SIZE, O_MTIME, O_STATE, L_INO, L_SIZE, L_MTIME, L_STATE) = range(8)
(DELIVERED, SESSION, PB, PM, CORRUPT) = range(8, 13)
OLDEST, LAST, IN_FLIGHT, FAILED = range(len(INT_COLUMNS), len(INT_COLUMNS) + 4)
ABSENT, READ, BAD = 0, 1, 2
NAN = float("nan")
#: seconds between two saves of the rows by the watchdog's looks (``pending``): the saved rows
#: only spare a new process the reads of what changed since, so a save a minute is plenty
LOOK_SAVE_S = 60.0

Row = list[Any]  # a tuple while loaded and unchanged


def cache_path(layout: Layout) -> Path:
    return layout.root / "cache" / "status-summary.bin"


def _new_row() -> Row:
    return [0] * len(INT_COLUMNS) + [NAN] * len(FLOAT_COLUMNS)


class SummaryCache:
    """The rows, in memory and on disk; ``census()`` brings them up to date and sums them."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.path = cache_path(layout)
        self._rows: dict[str, Row] | None = None
        self._lines: dict[str, list[Any]] = {}  # dead/quarantine file -> [ino, size, mtime, n]
        self._totals: tuple[Any, ...] | None = None  # the sums, until a row changes
        self._changed = False
        self._saved_at = -math.inf  # monotonic clock of the last save

    # ---- the saved rows ------------------------------------------------------------------

    def _load(self) -> dict[str, Row]:
        if self._rows is not None:
            return self._rows
        self._rows = {}
        try:
            data = self.path.read_bytes()
        except OSError:
            return self._rows
        try:
            self._rows, self._lines = summary_file.decode(data)
        except (ValueError, KeyError, TypeError, EOFError, OverflowError):
            self._rows, self._lines = {}, {}  # disposable: rebuilt below
        return self._rows

    def save(self) -> None:
        if not self._changed or self._rows is None:
            return
        try:
            write_bytes(self.path, summary_file.encode(self._rows, self._lines))
        except OSError:
            pass  # a cache that cannot be saved is rebuilt next time
        self._changed = False
        self._saved_at = time.monotonic()

    # ---- bringing a row up to date -------------------------------------------------------

    def _read_ledger(self, key: str, row: Row, errors: list[str]) -> None:
        path = self.layout.ledger(key)
        state, data = _read(path, "ledger", errors)
        if state == ABSENT:
            row[DELIVERED] = row[SESSION] = 0
            row[LAST] = row[IN_FLIGHT] = row[FAILED] = NAN
        if data is None:
            row[L_STATE] = state
            return
        try:
            ledger = Ledger.model_validate_json(data)
        except (ValidationError, ValueError):
            errors.append(f"ledger {path.name} is corrupt")
            row[L_STATE] = BAD
            return
        row[L_STATE] = READ
        row[DELIVERED] = ledger.delivered_seq
        row[SESSION] = int(ledger.session_id is not None)
        row[LAST] = NAN if ledger.last_delivered_at is None else float(ledger.last_delivered_at)
        row[IN_FLIGHT] = NAN
        if ledger.in_flight:
            since = ledger.in_flight_since
            row[IN_FLIGHT] = math.inf if since is None else float(since)
        failed_at = (ledger.last_error or {}).get("at") if ledger.failures else None
        numeric = isinstance(failed_at, int | float) and not isinstance(failed_at, bool)
        row[FAILED] = float(failed_at) if numeric else NAN  # type: ignore[arg-type]

    def _read_outbox(self, key: str, row: Row, errors: list[str]) -> None:
        path = self.layout.outbox(key)
        row[PB] = row[PM] = row[CORRUPT] = 0
        row[OLDEST] = NAN
        state, data = _read(path, "outbox", errors)
        if data is None:
            row[O_STATE] = state
            return
        parsed = parse(data)
        delivered = row[DELIVERED] if row[L_STATE] == READ else 0
        oldest = math.inf
        for record, _ in parsed.lines:
            if record.get("mark") or record["seq"] <= delivered:
                continue
            row[PB] += 1
            row[PM] += len(record.get("messages") or [])
            captured = record.get("captured_at")
            if isinstance(captured, int | float) and captured < oldest:
                oldest = float(captured)
        row[OLDEST] = oldest if oldest != math.inf else NAN
        row[CORRUPT] = len(parsed.corrupt)
        row[O_STATE] = READ

    def _refresh(
        self,
        key: str,
        row: Row,
        outbox: os.stat_result | None,
        ledger_ino: int | None,
        ledger_fd: int,
        outbox_errors: list[str],
        ledger_errors: list[str],
    ) -> bool:
        """Bring ``row`` up to date (ledger first: pending depends on it); True if it changed."""
        if outbox is None:
            outbox_changed = row[O_STATE] != ABSENT
        else:
            outbox_changed = (
                row[O_SIZE] != outbox.st_size
                or row[O_MTIME] != outbox.st_mtime_ns
                or row[O_INO] != outbox.st_ino
                or row[O_STATE] != READ
            )
        basis = (row[L_STATE], row[DELIVERED])
        changed = False
        if ledger_ino is None:
            if row[L_STATE] != ABSENT:
                row[L_INO : L_MTIME + 1] = [0, 0, 0]
                row[L_STATE], row[DELIVERED], row[SESSION] = ABSENT, 0, 0
                row[LAST] = row[IN_FLIGHT] = row[FAILED] = NAN
                changed = True
        elif ledger_ino != row[L_INO] or row[L_STATE] != READ or row[PB] or outbox_changed:
            try:
                st = (
                    os.stat(f"{key}.json", dir_fd=ledger_fd)
                    if ledger_fd >= 0
                    else os.stat(self.layout.ledger(key))
                )
                l_stamp = [st.st_ino, st.st_size, st.st_mtime_ns]
            except OSError:
                l_stamp = [0, 0, 0]  # gone or unreadable: the read says which
            if l_stamp != row[L_INO : L_MTIME + 1] or row[L_STATE] != READ:
                self._read_ledger(key, row, ledger_errors)  # a bad one is re-read every time
                row[L_INO : L_MTIME + 1] = l_stamp
                changed = True
        if outbox_changed or (row[L_STATE], row[DELIVERED]) != basis:
            if outbox is None:
                row[O_INO : O_MTIME + 1] = [0, 0, 0]
                row[O_STATE], row[PB], row[PM], row[CORRUPT], row[OLDEST] = ABSENT, 0, 0, 0, NAN
            else:
                row[O_INO : O_MTIME + 1] = [outbox.st_ino, outbox.st_size, outbox.st_mtime_ns]
                self._read_outbox(key, row, outbox_errors)  # an unreadable one: every time
            changed = True
        return changed

    def _line_files(self, directory: Path, tag: str) -> tuple[int, int, list[str]]:
        """(files, lines, errors) of the dead-letter or quarantine directory, by a byte count."""
        stats, error = list_stats(directory, ".jsonl")
        errors = [error] if error else []
        total = 0
        seen = set()
        for name, st in stats.items():
            slot = f"{tag}/{name}"
            seen.add(slot)
            stamp = [st.st_ino, st.st_size, st.st_mtime_ns]
            cached = self._lines.get(slot)
            if cached is None or cached[:3] != stamp:
                try:
                    cached = [*stamp, count_lines(directory / f"{name}.jsonl")]
                except OSError as exc:
                    errors.append(f"cannot read {name}.jsonl ({reason(exc)})")
                    self._lines.pop(slot, None)
                    continue
                self._lines[slot] = cached
                self._changed = True
            total += cached[3]
        for slot in [s for s in self._lines if s.startswith(tag + "/") and s not in seen]:
            del self._lines[slot]
            self._changed = True
        return len(stats), total, errors

    # ---- the census ----------------------------------------------------------------------

    def census(self) -> Census:
        out = Census()
        if self._refresh_rows(out) or self._totals is None:
            self._totals = _totals(self._rows or {})
        (
            out.sessions,
            out.corrupt_outbox_lines,
            out.conversations_pending,
            out.pending_batches,
            out.pending_messages,
            out.upper_bound_conversations,
            out.oldest_pending_at,
            out.newest_delivery_at,
        ) = self._totals
        out.dead_files, out.dead_records, out.dead_errors = self._line_files(
            self.layout.dead_dir, "dead"
        )
        out.quarantine_files, out.quarantined_lines, out.quarantine_errors = self._line_files(
            self.layout.quarantine_dir, "quarantine"
        )
        self.save()
        return out

    def _refresh_rows(self, out: Census) -> bool:
        """Bring every row up to date (``out`` gets the counts and listing errors); True when
        a row changed."""
        rows = self._load()
        outboxes, outbox_error = list_stats(self.layout.outbox_dir, ".jsonl")
        ledgers, ledger_error = list_inodes(self.layout.ledger_dir, ".json")
        out.outbox_errors = [outbox_error] if outbox_error else []
        out.ledger_errors = [ledger_error] if ledger_error else []
        keys = outboxes.keys() | ledgers.keys()
        for gone in [k for k in rows if k not in keys]:
            del rows[gone]
            self._totals = None
            self._changed = True
        ledger_fd = open_dir(self.layout.ledger_dir) if ledgers else -1
        rows_changed = False
        try:
            for key in keys:
                row = rows.get(key)
                outbox = outboxes.get(key)
                ledger_ino = ledgers.get(key)
                if row is not None and not row[PB] and _unchanged(row, outbox, ledger_ino):
                    continue  # the common case, decided without a call or a stat
                if row is None:
                    row = rows[key] = _new_row()
                    row[O_STATE] = BAD  # forces a first read
                    row[L_STATE] = ABSENT
                elif type(row) is tuple:
                    row = rows[key] = list(row)
                if self._refresh(
                    key,
                    row,
                    outbox,
                    ledger_ino,
                    ledger_fd,
                    out.outbox_errors,
                    out.ledger_errors,
                ):
                    rows_changed = True
        finally:
            if ledger_fd >= 0:
                os.close(ledger_fd)
        out.conversations = len(keys)
        out.ledgers = len(ledgers)
        if rows_changed:
            self._totals = None
            self._changed = True
        return rows_changed

    def pending(self, marks: dict[str, float], hinted_after: float) -> list[Pending]:
        """The conversations with pending batches, brought up to date, less those whose hint
        mark (``marks``: key -> its time) is newer than ``hinted_after``, and those whose
        ledger does not read (the census reports it; the sweep repairs or dead-letters it)."""
        self._refresh_rows(Census())
        if time.monotonic() - self._saved_at >= LOOK_SAVE_S:
            self.save()  # encoding 100,000 rows costs a look more than its reads
        found = []
        for key, row in (self._rows or {}).items():
            if not row[PB] or row[L_STATE] == BAD:
                continue
            mark = marks.get(key)
            if mark is not None and mark >= hinted_after:
                continue  # its hint waits in the broker
            found.append(
                Pending(
                    key,
                    0.0 if math.isnan(row[OLDEST]) else row[OLDEST],
                    mark,
                    _or_none(row[IN_FLIGHT]),
                    _or_none(row[FAILED]),
                    _or_none(row[LAST]),
                )
            )
        return found


def _or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _unchanged(row: Row, outbox: os.stat_result | None, ledger_ino: int | None) -> bool:
    """Both files are as the row saw them (by the outbox's stat and the ledger's inode)."""
    if outbox is None:
        if row[O_STATE] != ABSENT:
            return False
    elif (
        row[O_STATE] != READ
        or row[O_SIZE] != outbox.st_size
        or row[O_MTIME] != outbox.st_mtime_ns
        or row[O_INO] != outbox.st_ino
    ):
        return False
    if ledger_ino is None:
        return bool(row[L_STATE] == ABSENT)
    return bool(row[L_STATE] == READ and row[L_INO] == ledger_ino)


def _totals(rows: dict[str, Row]) -> tuple[Any, ...]:
    """Sums over the rows, in ``Census`` field order (see ``SummaryCache.census``)."""
    sessions = corrupt = conversations = batches = messages = upper = 0
    oldest = math.inf
    newest = -math.inf
    for row in rows.values():
        sessions += row[SESSION]
        if row[LAST] > newest:  # NaN compares False
            newest = row[LAST]
        if row[O_STATE] != READ:
            continue
        corrupt += row[CORRUPT]
        if row[PB]:
            conversations += 1
            batches += row[PB]
            messages += row[PM]
            if row[OLDEST] < oldest:
                oldest = row[OLDEST]
            if row[L_STATE] == BAD:
                upper += 1
    return (
        sessions,
        corrupt,
        conversations,
        batches,
        messages,
        upper,
        oldest if oldest != math.inf else None,
        newest if newest != -math.inf else None,
    )


def _read(path: Path, what: str, errors: list[str]) -> tuple[int, bytes | None]:
    """A state file's bytes (READ), or why there are none: ABSENT, or BAD with the reason
    added to ``errors``."""
    try:
        return READ, path.read_bytes()
    except FileNotFoundError:
        return ABSENT, None
    except OSError as exc:
        errors.append(f"cannot read {what} {path.name} ({reason(exc)})")
        return BAD, None
