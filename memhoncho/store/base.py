"""The store interface: everything durable that the host, the workers and beat share.

Two implementations, chosen by one setting (``store_url``; ``Deployment.store()``):

- ``files`` (``store_url`` unset): the data directory of one machine, as it always was
  (``store.files.FileStore`` wraps the outbox, ledger, fork, dead-letter and lock modules; the
  files on disk are unchanged).
- ``postgresql://...``: one database shared by many machines (``store.postgres.PostgresStore``).

Keys are conversation keys from ``ids.conversation_key`` only. Every method either does what it
says or raises a ``StoreError`` (``StoreUnavailable`` when the database cannot be reached): a
capture is acknowledged only once it is durable in the store.

The representation snapshots (what ``memory.sections`` renders) are here too, so a refresh
done by a worker on one machine is read by a host on another; they stay disposable (losing one
costs a refresh, never a message). The status census cache and the sweep index of the file
store are caches of the files, so they live with them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from memhoncho.errors import InvalidInput, MemhonchoError, OutboxCapacity
from memhoncho.models import ForkDecision, ForkRecord, Ledger, Record, Snapshot

__all__ = [
    "Appended",
    "BeforeReplace",
    "Census",
    "Pending",
    "Record",
    "Seen",
    "Store",
    "SweepListing",
]


@dataclass(frozen=True)
class Appended:
    """What ``Store.append`` did."""

    duplicate: bool
    seq: int | None = None
    #: a relay request was left (PostgreSQL, a capture that publishes no hint and found none
    #: waiting): the outbox relay of any machine publishes it
    relayed: bool = False


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
    upper_bound_conversations: int = 0  #: pending counted from 0 because the ledger is bad
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


class Pending(NamedTuple):
    """A conversation with pending records and no fresh hint, with what bounds when it could
    be delivered again (``Store.pending_conversations``; ``store/stranded.py`` reads it)."""

    key: str
    oldest_pending_at: float  #: its oldest pending capture (epoch seconds; 0 when unknown)
    hint_at: float | None  #: its hint mark's time (older than asked for), or None: no mark
    in_flight_since: float | None  #: its open send began (inf: at a time not recorded)
    failed_at: float | None  #: its newest failed delivery, while failures are counted
    last_delivered_at: float | None
    conversation_id: str | None = None  #: None: the store did not read it (``stranded``'s job)


#: ``rewrite``'s hook, given the records it drops before they leave the outbox
BeforeReplace = Callable[[list[Record]], None]

#: what a listing may have read of a conversation already: its ledger, first and last record
#: (the last one for its ``seq`` only)
Seen = tuple[Ledger | None, Record | None, Record | None]


@dataclass
class SweepListing:
    """The conversations a sweep should look at, and how to remember the clean ones.

    ``keys`` are the conversations that may have work; ``unchanged`` those known clean without
    a look. ``remember_clean`` is called once with every key the sweep found clean, so the next
    sweep can skip them (a hint only: forgetting it costs a look, never a record).
    """

    listed: int
    keys: list[str]
    unchanged: int = 0
    remember_clean: Callable[[set[str]], None] = field(default=lambda clean: None)
    seen: dict[str, Seen] = field(default_factory=dict)


class Store(abc.ABC):
    """The durable state of one deployment. Thread-safe; one per process and URL is enough."""

    #: "files" or "postgresql", for status and errors
    kind: str = "?"

    # ---- the outbox ------------------------------------------------------------------------

    @abc.abstractmethod
    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> Appended:
        """Make ``record`` durable after the conversation's others (a ``seq`` is assigned).

        A batch already in the outbox, or delivered within the ledger's window, is a duplicate
        (nothing written). OutboxCapacity past ``max_pending`` undelivered batches,
        CaptureTooLarge past ``max_bytes``. ``after_write`` runs once, after the record is
        written and before it is made durable (the hint is published meanwhile).
        """

    def append_batch(
        self,
        key: str,
        records: Sequence[Record],
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> list[Appended | MemhonchoError]:
        """``append`` of each record in order, answered per record (a refusal is its error,
        the others go on). The files write them with one fsync; here, one append each."""
        outcomes: list[Appended | MemhonchoError] = []
        for record in records:
            try:
                outcomes.append(
                    self.append(
                        key, record, max_pending=max_pending, max_bytes=max_bytes,
                        after_write=after_write if not outcomes else None,
                    )
                )  # fmt: skip
            except (InvalidInput, OutboxCapacity) as exc:
                outcomes.append(exc)
        return outcomes

    @abc.abstractmethod
    def records(self, key: str) -> list[Record]:
        """Every record of the conversation's outbox, delivered or not, in capture order."""

    def pending(self, key: str, after_seq: int) -> list[Record]:
        """The records with ``seq > after_seq``, in capture order."""
        return [r for r in self.records(key) if r["seq"] > after_seq]

    @abc.abstractmethod
    def edges(self, key: str) -> tuple[Record | None, Record | None]:
        """The first and the last record of the outbox (None, None when it holds none)."""

    def newest_record(self, key: str) -> Record | None:
        """The newest record of the outbox; None when it holds none."""
        return self.edges(key)[1]

    def newest_seq(self, key: str) -> int:
        """The seq of the newest record in the outbox; 0 when it holds none."""
        last = self.newest_record(key)
        return int(last["seq"]) if last is not None else 0

    @abc.abstractmethod
    def rewrite(
        self,
        key: str,
        keep: Callable[[Record], bool],
        before_replace: BeforeReplace | None = None,
    ) -> tuple[list[Record], list[Record]]:
        """Keep the records ``keep`` accepts; (kept, dropped). ``before_replace(dropped)`` runs
        before they leave, so a crash between leaves a record in both places, never neither."""

    def compact_delivered(self) -> dict[str, int]:
        """Drop every delivered record at once; how many per conversation. A store that
        compacts one conversation at a time (the files: a rewrite each) returns nothing here
        and the sweep's ``rewrite`` does it."""
        return {}

    @abc.abstractmethod
    def remove_outbox(self, key: str) -> None:
        """Delete a conversation's outbox (operator purge only)."""

    @abc.abstractmethod
    def conversation_keys(self) -> list[str]:
        """Every conversation with an outbox, sorted."""

    @abc.abstractmethod
    def sweep_listing(self) -> SweepListing:
        """What the sweep should look at (see ``SweepListing``)."""

    def quarantine_mark(self, key: str) -> int:
        """Where the conversation's quarantine ends now (see ``quarantined_since``)."""
        return 0

    def quarantined_since(self, key: str, mark: int) -> int:
        """Lines quarantined since ``quarantine_mark`` said ``mark`` (the database quarantines
        nothing: it holds no torn or corrupt line)."""
        return 0

    # ---- serialization -----------------------------------------------------------------------

    @abc.abstractmethod
    def conversation_lock(
        self, key: str, *, timeout_s: float | None = None
    ) -> AbstractContextManager[None]:
        """Held by the one worker delivering or resolving a fork of this conversation.

        Released when the holder's process dies. ``timeout_s=None`` blocks, ``0`` tries once;
        LockBusy when it cannot be had in time.
        """

    # ---- ledgers -----------------------------------------------------------------------------

    @abc.abstractmethod
    def read_ledger(self, key: str) -> Ledger | None:
        """The conversation's ledger; None when it has none; CorruptFile when unreadable."""

    @abc.abstractmethod
    def write_ledger(self, key: str, ledger: Ledger) -> None:
        """Replace the ledger (only the holder of the conversation lock writes it)."""

    @abc.abstractmethod
    def ledger_keys(self) -> list[str]:
        """Every conversation with a ledger, sorted."""

    # ---- forks -------------------------------------------------------------------------------

    @abc.abstractmethod
    def read_fork(self, key: str) -> ForkRecord | None: ...

    def has_pending_fork(self, key: str) -> bool:
        """Whether the child has a fork record (an unreadable one counts: resolution says why)."""
        from memhoncho.errors import CorruptFile

        try:
            return self.read_fork(key) is not None
        except CorruptFile:
            return True

    @abc.abstractmethod
    def create_fork(self, key: str, record: ForkRecord) -> bool:
        """Write the record unless the child has one already (then False, nothing changed)."""

    @abc.abstractmethod
    def remove_fork(self, key: str) -> None: ...

    @abc.abstractmethod
    def pending_fork_keys(self) -> list[str]: ...

    @abc.abstractmethod
    def append_decision(self, key: str, decision: ForkDecision) -> None: ...

    @abc.abstractmethod
    def read_decisions(self) -> dict[str, dict[str, Any]]:
        """The latest decision per child key."""

    @abc.abstractmethod
    def read_clone_marker(self, parent_key: str) -> dict[str, Any] | None:
        """The parent's cloning marker; an unreadable one counts as present (``{}``)."""

    @abc.abstractmethod
    def write_clone_marker(self, parent_key: str, marker: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def remove_clone_marker(self, parent_key: str) -> None: ...

    # ---- dead letters ------------------------------------------------------------------------

    @abc.abstractmethod
    def dead_lock(self, key: str) -> AbstractContextManager[None]:
        """Serializes the sweep's appends and replay's removals of one conversation's dead."""

    @abc.abstractmethod
    def append_dead(self, key: str, records: list[Record], reason: str) -> int:
        """Keep ``records`` as dead letters (call with ``dead_lock`` held); how many."""

    @abc.abstractmethod
    def read_dead(self, key: str) -> list[Record]: ...

    @abc.abstractmethod
    def replace_dead(self, key: str, remaining: list[Record]) -> None: ...

    @abc.abstractmethod
    def dead_keys(self) -> list[str]: ...

    # ---- departures and the last-delivery marker ---------------------------------------------

    @abc.abstractmethod
    def write_departure(self, peer_id: str, departure: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def departures(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Every departure notice, and the errors met reading them."""

    @abc.abstractmethod
    def mark_last_delivery(self, marker: dict[str, Any]) -> None:
        """The newest delivery, for status (``at``, ``conversation_key``, ``messages``...)."""

    @abc.abstractmethod
    def last_delivery(self) -> tuple[float | None, str | None]:
        """(when the marker says the last delivery was, why it cannot be read)."""

    # ---- representation snapshots (``memory``) ------------------------------------------------

    @abc.abstractmethod
    def write_snapshot(self, key: str, snapshot: Snapshot) -> None:
        """Replace the conversation's snapshot (the last refresh written wins)."""

    @abc.abstractmethod
    def read_snapshot(self, key: str) -> Snapshot | None:
        """The conversation's snapshot; None when it has none; CorruptFile when unreadable.

        On the host's prompt path: one read (a file, or one indexed row), no lock.
        """

    @abc.abstractmethod
    def snapshot_times(self) -> dict[str, float | None]:
        """When each conversation's snapshot was fetched, by key; None for an unreadable one
        (a refresh is due at once). A conversation without a snapshot is not listed."""

    @abc.abstractmethod
    def remove_snapshot(self, key: str) -> bool:
        """Delete the conversation's snapshot (a purged user); whether there was one."""

    # ---- status ------------------------------------------------------------------------------

    @abc.abstractmethod
    def census(self) -> Census:
        """Counts for the status view: pending, sessions, dead letters, quarantine."""

    @abc.abstractmethod
    def pending_conversations(self, hinted_after: float) -> list[Pending]:
        """Each conversation with pending records whose ledger reads, less those with a hint
        mark claimed or renewed at or after ``hinted_after`` (their hint waits). Read as the
        census reads, so it stays cheap at 100,000 conversations (``store/stranded.py``)."""

    # ---- the hint marks (``store/hint_marks.py``): whether a conversation's hint waits -----

    @abc.abstractmethod
    def hint_mark_at(self, key: str) -> float | None:
        """When the conversation's hint mark was claimed or last renewed; None: no mark."""

    @abc.abstractmethod
    def claim_hint(self, key: str, *, due_in_s: float = 0.0) -> bool:
        """Whether the caller must publish a hint: True when it claimed the mark (none waited,
        or the waiting one is older than ``hint_marks.STALE_S``, presumed lost). A hint that
        runs ``due_in_s`` later (a retry's countdown) dates its mark then."""

    @abc.abstractmethod
    def take_hint(self, key: str) -> None:
        """A delivery starts, before it reads the outbox: captures from now on publish."""

    @abc.abstractmethod
    def release_hint(self, key: str, conversation_id: str | None = None) -> None:
        """The claimed hint was not published: the next capture publishes. ``conversation_id``:
        the outbox relay is asked to as well, where relay requests live beside the marks
        (PostgreSQL; the file relay finds the conversation by its changed outbox)."""

    @abc.abstractmethod
    def renew_hint(self, key: str) -> None:
        """A worker received the hint: its age counts from now (a mark dated later keeps its
        date); no mark stays none."""

    def deployment_id(self) -> str | None:
        """The identity the store itself keeps, which its hints carry (a database's); None:
        the data directory's is the deployment's (``Deployment.hint_identity``)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: a store without resources has nothing
        """Release connections (the process is ending)."""


def dead_records_added(records: list[Record], reason: str, now: float) -> list[Record]:
    """The records as they are kept as dead letters: every field, plus when and why."""
    return [{**r, "dead_at": now, "dead_reason": reason} for r in records]
