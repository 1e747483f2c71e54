"""The file store: one data directory on one machine (the default, ``store_url`` unset).

A thin face over the modules that own the files (outbox, ledger, forks, dead letters, locks,
sweep index): the files on disk are exactly what they were before the store interface. Every
process of the deployment must see the same directory, with working ``fcntl`` locks and
``fsync``: one machine, or a shared filesystem that truly provides both.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from memhoncho.errors import CorruptFile, MemhonchoError
from memhoncho.models import ForkDecision, ForkRecord, Ledger, Snapshot
from memhoncho.store import deadletters, hint_marks, peek, sweep_index
from memhoncho.store import forks as fork_files
from memhoncho.store.atomic import fsync_dir, read_model, write_bytes, write_json
from memhoncho.store.base import Appended, Census, Pending, Record, Store, SweepListing
from memhoncho.store.layout import Layout, keys_in
from memhoncho.store.ledger import LedgerCache, read_ledger, write_ledger
from memhoncho.store.locks import file_lock
from memhoncho.store.outbox import Outbox


class FileStore(Store):
    kind = "files"

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.outbox = Outbox(layout)
        self._ledgers = LedgerCache(layout)
        self._census_lock = threading.Lock()
        self._summary: Any = None  # store.census.SummaryCache, built on first census
        self._marks: Any = None  # store.hint_marks.MarkTimes, built on first look

    # ---- the outbox ------------------------------------------------------------------------

    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> Appended:
        appended = self.outbox.append(
            key,
            record,
            max_pending=max_pending,
            max_bytes=max_bytes,
            after_write=after_write,
            **self._ledger_questions(key),
        )
        return Appended(duplicate=appended.duplicate, seq=appended.seq)

    def append_batch(
        self,
        key: str,
        records: Sequence[Record],
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> list[Appended | MemhonchoError]:
        """All under one lock, one write and ONE fsync (``store.batches``)."""
        from memhoncho.store.batches import append_batch

        outcomes = append_batch(
            self.outbox,
            key,
            records,
            max_pending=max_pending,
            max_bytes=max_bytes,
            after_write=after_write,
            **self._ledger_questions(key),
        )
        return [
            o if isinstance(o, MemhonchoError) else Appended(duplicate=o.duplicate, seq=o.seq)
            for o in outcomes
        ]

    def _ledger_questions(self, key: str) -> dict[str, Callable[..., Any]]:
        """What an append may ask the conversation's ledger, asked only when it needs to."""
        return {
            "delivered_seq": lambda: self._delivered_seq(key),
            "delivered_before": lambda batch: self._delivered_before(key, batch),
            "delivered_digest": lambda batch: self._delivered_digest(key, batch),
        }

    def _delivered_seq(self, key: str) -> int:
        try:
            return self._ledgers.delivered_seq(key)
        except CorruptFile:
            return 0  # the outbox's own clock still orders the new record after the old

    def _delivered_digest(self, key: str, batch_id: str) -> str | None:
        try:
            return self._ledgers.delivered_digest(key, batch_id)
        except CorruptFile:
            return None  # unknown content: a duplicate, as before digests

    def _delivered_before(self, key: str, batch_id: str) -> bool:
        try:
            return self._ledgers.delivered_before(key, batch_id)
        except CorruptFile:
            return False  # accept: a redelivery is deduplicated against Honcho, a loss is not

    def records(self, key: str) -> list[Record]:
        return self.outbox.read(key).records

    def pending(self, key: str, after_seq: int) -> list[Record]:
        return self.outbox.pending(key, after_seq)

    def edges(self, key: str) -> tuple[Record | None, Record | None]:
        found = peek.edges(self.layout.outbox(key))
        if found is not None:
            return found.first, found.last
        records = self.records(key)  # a torn or corrupt edge: the full read repairs it
        return (records[0], records[-1]) if records else (None, None)

    def newest_record(self, key: str) -> Record | None:
        try:
            return peek.newest(self.layout.outbox(key))  # a line read from the end, no lock
        except peek.Unreadable:
            records = self.records(key)  # a torn or corrupt tail: the full read repairs it
            return records[-1] if records else None

    def rewrite(
        self,
        key: str,
        keep: Callable[[Record], bool],
        before_replace: Callable[[list[Record]], None] | None = None,
    ) -> tuple[list[Record], list[Record]]:
        return self.outbox.rewrite(key, keep, before_replace)

    def remove_outbox(self, key: str) -> None:
        self.outbox.remove(key)
        hint_marks.forget(self.layout, key)

    def conversation_keys(self) -> list[str]:
        return self.layout.conversation_keys()

    def sweep_listing(self) -> SweepListing:
        """Outboxes whose stat stamp differs from the one the last sweep found clean."""
        stamps = sweep_index.outbox_stamps(self.layout)  # before any look: a change is seen
        index = sweep_index.load_index(self.layout)
        unchanged = {k: s for k, s in stamps.items() if index.get(k) == s}
        keys = [k for k in stamps if k not in unchanged]

        def remember(clean: set[str]) -> None:
            kept = {**unchanged, **{k: stamps[k] for k in clean if k in stamps}}
            if kept != index:
                sweep_index.save_index(self.layout, dict(sorted(kept.items())))

        return SweepListing(len(stamps), keys, len(unchanged), remember)

    def quarantine_mark(self, key: str) -> int:
        return sweep_index.file_stamp(self.layout.quarantine(key))[1]

    def quarantined_since(self, key: str, mark: int) -> int:
        try:
            with open(self.layout.quarantine(key), "rb") as handle:
                handle.seek(mark)
                return handle.read().count(b"\n")
        except FileNotFoundError:
            return 0

    # ---- serialization -----------------------------------------------------------------------

    def conversation_lock(
        self, key: str, *, timeout_s: float | None = None
    ) -> AbstractContextManager[None]:
        return file_lock(self.layout.conversation_lock(key), timeout_s=timeout_s)

    # ---- ledgers -----------------------------------------------------------------------------

    def read_ledger(self, key: str) -> Ledger | None:
        return read_ledger(self.layout, key)

    def write_ledger(self, key: str, ledger: Ledger) -> None:
        write_ledger(self.layout, key, ledger)

    def ledger_keys(self) -> list[str]:
        return keys_in(self.layout.ledger_dir, ".json")

    # ---- forks -------------------------------------------------------------------------------

    def read_fork(self, key: str) -> ForkRecord | None:
        return fork_files.read_fork(self.layout, key)

    def has_pending_fork(self, key: str) -> bool:
        return self.layout.pending_fork(key).exists()  # one stat, on every delivery

    def create_fork(self, key: str, record: ForkRecord) -> bool:
        return fork_files.create_fork(self.layout, key, record)

    def remove_fork(self, key: str) -> None:
        fork_files.remove_fork(self.layout, key)

    def pending_fork_keys(self) -> list[str]:
        return fork_files.pending_fork_keys(self.layout)

    def append_decision(self, key: str, decision: ForkDecision) -> None:
        fork_files.append_decision(self.layout, key, decision)

    def read_decisions(self) -> dict[str, dict[str, Any]]:
        return fork_files.read_decisions(self.layout)

    def read_clone_marker(self, parent_key: str) -> dict[str, Any] | None:
        return fork_files.read_clone_marker(self.layout, parent_key)

    def write_clone_marker(self, parent_key: str, marker: dict[str, Any]) -> None:
        fork_files.write_clone_marker(self.layout, parent_key, marker)

    def remove_clone_marker(self, parent_key: str) -> None:
        fork_files.remove_clone_marker(self.layout, parent_key)

    # ---- dead letters ------------------------------------------------------------------------

    def dead_lock(self, key: str) -> AbstractContextManager[None]:
        return deadletters.dead_lock(self.layout, key)

    def append_dead(self, key: str, records: list[Record], reason: str) -> int:
        return deadletters.append_dead(self.layout, key, records, reason)

    def read_dead(self, key: str) -> list[Record]:
        return deadletters.read_dead(self.layout, key)

    def replace_dead(self, key: str, remaining: list[Record]) -> None:
        deadletters.replace_dead(self.layout, key, remaining)

    def dead_keys(self) -> list[str]:
        return deadletters.dead_keys(self.layout)

    # ---- departures and the last-delivery marker ---------------------------------------------

    def write_departure(self, peer_id: str, departure: dict[str, Any]) -> None:
        write_json(self.layout.departures_dir / f"{peer_id}.json", departure)

    def departures(self) -> tuple[list[dict[str, Any]], list[str]]:
        directory = self.layout.departures_dir
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except FileNotFoundError:
            return [], []
        notices: list[dict[str, Any]] = []
        errors: list[str] = []
        for name in names:
            try:
                value = json.loads((directory / name).read_bytes())
                if not isinstance(value, dict):
                    raise ValueError(name)
                notices.append({"peer_id": name[:-5], **value})
            except (OSError, ValueError):
                errors.append(f"departure notice {name} cannot be read")
        return notices, errors

    def mark_last_delivery(self, marker: dict[str, Any]) -> None:
        # Only the status view reads it, and the ledgers hold what was delivered: a crash that
        # loses the newest marker loses nothing, so it costs no fsync on every delivery.
        write_json(self.layout.last_delivery, marker, durable=False)

    def last_delivery(self) -> tuple[float | None, str | None]:
        path = self.layout.last_delivery
        try:
            value = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"cannot read {path.name} ({exc.strerror or type(exc).__name__})"
        except ValueError:
            return None, f"{path.name} is not valid JSON"
        return marker_time(value, path.name)

    # ---- representation snapshots: ``cache/representations/<key>.json`` ----------------------

    def write_snapshot(self, key: str, snapshot: Snapshot) -> None:
        write_bytes(self.layout.cache(key), snapshot.model_dump_json().encode("utf-8"))

    def read_snapshot(self, key: str) -> Snapshot | None:
        return read_model(self.layout.cache(key), Snapshot, "the representation cache file")

    def snapshot_times(self) -> dict[str, float | None]:
        times: dict[str, float | None] = {}
        for key in keys_in(self.layout.cache_dir, ".json"):
            try:
                snapshot = self.read_snapshot(key)
            except CorruptFile:
                times[key] = None
                continue
            if snapshot is not None:  # None: removed since the listing
                times[key] = snapshot.fetched_at
        return times

    def remove_snapshot(self, key: str) -> bool:
        try:
            self.layout.cache(key).unlink()
        except FileNotFoundError:
            return False
        fsync_dir(self.layout.cache_dir)
        return True

    # ---- status ------------------------------------------------------------------------------

    def census(self) -> Census:
        from memhoncho.store.census import SummaryCache

        with self._census_lock:
            if self._summary is None:
                self._summary = SummaryCache(self.layout)
            census: Census = self._summary.census()
            return census

    def pending_conversations(self, hinted_after: float) -> list[Pending]:
        """The census's rows (a stat per outbox, a read only of what changed) joined with the
        hint marks (one listing, ``hint_marks.MarkTimes``)."""
        from memhoncho.store.census import SummaryCache

        with self._census_lock:
            if self._summary is None:
                self._summary = SummaryCache(self.layout)
            if self._marks is None:
                self._marks = hint_marks.MarkTimes(self.layout)
            marks = self._marks.read(fresh_after=hinted_after)
            pending: list[Pending] = self._summary.pending(marks, hinted_after)
            return pending

    def claim_hint(self, key: str, *, due_in_s: float = 0.0) -> bool:
        return hint_marks.claim(self.layout, key, due_in_s=due_in_s)

    def take_hint(self, key: str) -> None:
        hint_marks.taken(self.layout, key)

    def release_hint(self, key: str, conversation_id: str | None = None) -> None:
        hint_marks.release(self.layout, key)

    def renew_hint(self, key: str) -> None:
        hint_marks.renew(self.layout, key)

    def hint_mark_at(self, key: str) -> float | None:
        try:
            return hint_marks.mark_path(self.layout, key).stat().st_mtime
        except OSError:  # no mark (taken, or never claimed)
            return None


def marker_time(value: Any, name: str) -> tuple[float | None, str | None]:
    """The delivery time a last-delivery marker holds, or why it holds none."""
    stamp = None
    if isinstance(value, dict):
        stamp = value.get("at", value.get("last_delivery_at", value.get("delivered_at")))
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return None, f"{name} holds no delivery time"
    return float(stamp), None
