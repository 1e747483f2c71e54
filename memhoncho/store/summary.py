"""A cheap, read-only census of the store for the status view.

Each conversation's outbox and ledger are summarised once and the summary is kept, keyed by the
file's stat, in ``cache/status-summary.json``: a later read only lists the directories and
parses what changed. Nothing here takes a lock or repairs a file (the outbox does that under
its lock); an unterminated tail seen without the lock may be an append in progress, so it is
not counted as corruption.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memhoncho.models import Ledger
from memhoncho.store.atomic import write_json
from memhoncho.store.layout import Layout
from memhoncho.store.outbox import parse

CACHE_VERSION = 1
Stamp = list[int]  # [inode, size, mtime_ns]


def cache_path(layout: Layout) -> Path:
    return layout.root / "cache" / "status-summary.json"


def _scan(directory: Path, suffix: str) -> tuple[dict[str, Stamp], str | None]:
    """``{name without suffix: stamp}``; the reason when the directory cannot be listed."""
    found: dict[str, Stamp] = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(suffix) or name.startswith("."):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # removed while listing
                found[name[: -len(suffix)]] = [st.st_ino, st.st_size, st.st_mtime_ns]
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot list {directory.name}/ ({exc.strerror or type(exc).__name__})"
    return found, None


@dataclass
class Census:
    """What the store holds now. Each ``*_errors`` list names files that could not be read."""

    conversations: int = 0
    pending_batches: int = 0
    pending_messages: int = 0
    oldest_pending_at: float | None = None
    conversations_pending: int = 0
    corrupt_outbox_lines: int = 0  #: seen, not yet quarantined by the outbox
    outbox_errors: list[str] = field(default_factory=list)
    upper_bound_conversations: int = 0  #: pending counted from 0 because the ledger is corrupt
    ledgers: int = 0
    sessions: int = 0
    newest_delivery_at: float | None = None
    ledger_errors: list[str] = field(default_factory=list)
    dead_files: int = 0
    dead_records: int = 0
    dead_errors: list[str] = field(default_factory=list)
    quarantine_files: int = 0
    quarantined_lines: int = 0
    quarantine_errors: list[str] = field(default_factory=list)


def _outbox_entry(path: Path) -> dict[str, Any]:
    """``r``: [seq, messages, captured_at] per record; ``c``: corrupt lines; ``e``: read error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {"r": [], "c": 0}
    except OSError as exc:
        return {"e": f"cannot read outbox {path.name} ({exc.strerror or type(exc).__name__})"}
    parsed = parse(data)
    records = [
        [r["seq"], len(r.get("messages") or []), float(r.get("captured_at") or 0)]
        for r in parsed.records
    ]
    return {"r": records, "c": len(parsed.corrupt)}


def _ledger_entry(path: Path) -> dict[str, Any]:
    """``d``: delivered_seq; ``s``: has a Honcho session; ``t``: last delivery; ``e``: error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {"d": 0, "s": False, "t": None}
    except OSError as exc:
        return {"e": f"cannot read ledger {path.name} ({exc.strerror or type(exc).__name__})"}
    try:
        ledger = Ledger.model_validate_json(data)
    except (ValidationError, ValueError):
        return {"e": f"ledger {path.name} is corrupt"}
    return {
        "d": ledger.delivered_seq,
        "s": ledger.session_id is not None,
        "t": ledger.last_delivered_at,
    }


def _line_file_entry(path: Path) -> dict[str, Any]:
    """``n``: complete lines in a dead-letter or quarantine file, by a byte count."""
    try:
        with path.open("rb") as handle:
            count = 0
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
        return {"n": count}
    except FileNotFoundError:
        return {"n": 0}
    except OSError as exc:
        return {"e": f"cannot read {path.name} ({exc.strerror or type(exc).__name__})"}


class SummaryCache:
    """Per-file summaries keyed by stat; persisted so a one-shot CLI read is cheap too."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.path = cache_path(layout)
        self._memory: dict[str, dict[str, Any]] | None = None
        self._changed = False

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._memory is not None:
            return self._memory
        try:
            value = json.loads(self.path.read_bytes())
            sections = value["sections"] if value.get("version") == CACHE_VERSION else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            sections = {}  # a disposable cache: rebuild it
        self._memory = {name: sections.get(name, {}) for name in ("o", "l", "dead", "q")}
        return self._memory

    def _entries(
        self, section: str, stamps: dict[str, Stamp], directory: Path, suffix: str, reader: Any
    ) -> dict[str, dict[str, Any]]:
        cached = self._load()[section]
        fresh: dict[str, dict[str, Any]] = {}
        for name, stamp in stamps.items():
            entry = cached.get(name)
            if entry is None or entry.get("stamp") != stamp or "e" in entry:
                entry = {**reader(directory / f"{name}{suffix}"), "stamp": stamp}
                self._changed = True
            fresh[name] = entry
        if len(fresh) != len(cached):
            self._changed = True
        self._load()[section] = fresh
        return fresh

    def save(self) -> None:
        if not self._changed or self._memory is None:
            return
        try:
            write_json(self.path, {"version": CACHE_VERSION, "sections": self._memory})
        except OSError:
            pass  # a cache that cannot be saved is rebuilt next time
        self._changed = False

    def census(self) -> Census:
        layout = self.layout
        out = Census()
        outbox_stamps, outbox_err = _scan(layout.outbox_dir, ".jsonl")
        ledger_stamps, ledger_err = _scan(layout.ledger_dir, ".json")
        dead_stamps, dead_err = _scan(layout.dead_dir, ".jsonl")
        q_stamps, q_err = _scan(layout.quarantine_dir, ".jsonl")
        outboxes = self._entries("o", outbox_stamps, layout.outbox_dir, ".jsonl", _outbox_entry)
        ledgers = self._entries("l", ledger_stamps, layout.ledger_dir, ".json", _ledger_entry)
        dead = self._entries("dead", dead_stamps, layout.dead_dir, ".jsonl", _line_file_entry)
        quarantine = self._entries("q", q_stamps, layout.quarantine_dir, ".jsonl", _line_file_entry)
        self.save()

        out.outbox_errors = [outbox_err] if outbox_err else []
        out.ledger_errors = [ledger_err] if ledger_err else []
        out.ledgers = len(ledgers)
        for entry in ledgers.values():
            if "e" in entry:
                out.ledger_errors.append(entry["e"])
                continue
            out.sessions += bool(entry["s"])
            t = entry.get("t")
            if t is not None and (out.newest_delivery_at is None or t > out.newest_delivery_at):
                out.newest_delivery_at = t
        out.conversations = len(outboxes.keys() | ledgers.keys())
        for key, entry in outboxes.items():
            if "e" in entry:
                out.outbox_errors.append(entry["e"])
                continue
            out.corrupt_outbox_lines += entry["c"]
            ledger = ledgers.get(key, {"d": 0})
            if "e" in ledger:
                out.upper_bound_conversations += 1
            delivered = ledger.get("d", 0)
            pending = [r for r in entry["r"] if r[0] > delivered]
            if not pending:
                continue
            out.conversations_pending += 1
            out.pending_batches += len(pending)
            out.pending_messages += sum(r[1] for r in pending)
            oldest = min(r[2] for r in pending)
            if out.oldest_pending_at is None or oldest < out.oldest_pending_at:
                out.oldest_pending_at = oldest
        for entries, err, attr in (
            (dead, dead_err, "dead"),
            (quarantine, q_err, "quarantine"),
        ):
            errors = [err] if err else []
            lines = 0
            for entry in entries.values():
                if "e" in entry:
                    errors.append(entry["e"])
                else:
                    lines += entry["n"]
            if attr == "dead":
                out.dead_files, out.dead_records, out.dead_errors = len(entries), lines, errors
            else:
                out.quarantine_files, out.quarantined_lines = len(entries), lines
                out.quarantine_errors = errors
        return out
