"""The types of what crosses memhoncho's boundaries: the host's runs (pydantic), the ledger
(pydantic) and the outbox record (a ``TypedDict``: a plain dict on the capture path).

Inputs are strict (no coercion of wrong types, unknown keys refused) so a malformed event is
refused before anything is written.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    model_serializer,
)

MAX_RUN_ID_LEN = 256  # characters
OUTBOX_ID_KEY = "memhoncho_outbox_id"  # metadata key every Honcho message carries, for dedup
USER = "user"  # the peer roles of a message in the outbox and in Honcho
AGENT = "agent"
MAX_INPUTS = 1000  # user inputs in one run
MAX_SESSION_METADATA_KEYS = 20  # a run's session metadata (Honcho takes 100 keys)
#: Unix seconds of 10000-01-01: a later "epoch" is a mistake (milliseconds sent as seconds)
MAX_EPOCH_S = 253_402_300_800.0
HAPPENED_AT_RULE = "a timezone-aware ISO 8601 time or Unix seconds (1970 to 9999)"


def parse_happened_at(value: object) -> datetime:
    """When a run happened, as an aware UTC datetime: from an aware ``datetime``, an ISO 8601
    string with an offset (``Z`` too) or Unix seconds. A naive time is refused, not guessed:
    the host's local zone would silently shift every imported year."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"happened_at must be {HAPPENED_AT_RULE}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or not 0 <= value < MAX_EPOCH_S:
            raise ValueError(f"happened_at must be {HAPPENED_AT_RULE}")
        return datetime.fromtimestamp(value, tz=UTC)
    else:
        raise ValueError(f"happened_at must be {HAPPENED_AT_RULE}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"happened_at has no timezone; it must be {HAPPENED_AT_RULE}")
    try:
        return when.astimezone(UTC)
    except OverflowError:  # an offset pushes it past year 1 or 9999
        raise ValueError(f"happened_at must be {HAPPENED_AT_RULE}") from None


#: a run's own time; validated by ``parse_happened_at``
HappenedAt = Annotated[datetime, BeforeValidator(parse_happened_at)]


# Every model here builds its validator on first use (``defer_build``), not at import: a
# one-shot ``memhoncho capture`` or ``status`` then pays only for the models it validates
# (a capture that finds no ledger never builds Ledger's). The validation is the same.
DEFERRED = ConfigDict(defer_build=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class UserInput(_Strict):
    """One user input of the run, in admission order."""

    entry_id: StrictInt = Field(ge=0)
    text: StrictStr


class ContentBlock(BaseModel):
    """A block of the answer; only ``text`` blocks are delivered, others are ignored."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, defer_build=True)

    type: StrictStr
    text: StrictStr | None = None


class Answer(_Strict):
    entry_id: StrictInt = Field(ge=0)
    content: list[ContentBlock] = Field(max_length=10_000)


class Answered(_Strict):
    status: Literal["answered"]
    answer: Answer


class Unanswered(_Strict):
    status: Literal["unanswered"]


class SelectionChange(_Strict):
    """The object form: adds and removes; it never excludes memhoncho."""

    add: list[StrictStr] = Field(default_factory=list)
    remove: list[StrictStr] = Field(default_factory=list)


class RunEvent(_Strict):
    """A settled run as the host hands it to ``Host.capture``."""

    conversation_id: StrictStr
    #: required, ``None`` allowed: an ownerless run must say so, never be one by omission
    owner: StrictStr | None
    run_id: StrictStr = Field(min_length=1, max_length=MAX_RUN_ID_LEN)
    inputs: list[UserInput] = Field(default_factory=list, max_length=MAX_INPUTS)
    outcome: Annotated[Answered | Unanswered, Field(discriminator="status")]
    selection: list[StrictStr] | SelectionChange | None = None
    #: when the run happened (an import's original time); sent to Honcho as each message's
    #: ``created_at``. None: the capture time, as before
    happened_at: HappenedAt | None = None
    #: what the conversation's Honcho session is created with (Claude Code: the project);
    #: the first delivered run's counts, later runs' are kept in their records only
    session_metadata: dict[StrictStr, StrictStr] | None = Field(
        default=None, max_length=MAX_SESSION_METADATA_KEYS
    )


class CaptureStatus(StrEnum):
    """What ``capture`` did with a run."""

    CAPTURED = "captured"  #: appended to the outbox and fsynced
    DUPLICATE = "duplicate"  #: this run was captured before; nothing written
    NOT_SELECTED = "not-selected"  #: the run's selection excludes memhoncho; nothing written
    EMPTY = "empty"  #: nothing left to deliver after skipping empty texts; nothing written


class HintOutcome(StrEnum):
    """What became of a captured run's delivery hint (``enqueued``: a hint is on the broker)."""

    PUBLISHED = "published"  #: a delivery hint is on the broker
    WAITING = "waiting"  #: a hint already waiting for the conversation covers this record
    RELAY = "relay"  #: left for the outbox relay to publish (``memhoncho capture``'s way)
    NO_KEY = "no-key"  #: no API key yet: delivery waits for one (the relay or sweep hints)
    BROKER_DOWN = "broker-down"  #: the publish failed: the relay or the sweep hints later
    NONE = "none"  #: nothing was captured (a duplicate, not selected, empty)


class CaptureResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    status: CaptureStatus
    batch_id: str | None = None
    enqueued: bool = False
    #: what happened to the delivery hint, in words: ``enqueued`` alone cannot tell a record
    #: left for the relay from one waiting for an API key
    hint: HintOutcome = HintOutcome.NONE
    #: secrets replaced by ``[REDACTED]`` in this run's texts before it was written (captured
    #: runs only; the count, never what was replaced)
    redactions: int = 0


#: how a forked conversation's session began: a clone of the parent at an anchor, or fresh
#: because the anchor left the window, the parent had nothing, was unknown, or never came
class ForkRecord(BaseModel):
    """A fork the host announced whose Honcho session is not established yet (``store.forks``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)  # built on first use

    parent_id: str
    child_id: str
    at_entry: int
    created_at: float  #: wall-clock seconds; the parent-wait bound counts from here


ForkOutcome = Literal["clone", "none-window", "none-empty", "none-unknown-parent", "none-timeout"]


class ForkDecision(BaseModel):
    """How a forked conversation's Honcho session began, and why."""

    model_config = DEFERRED

    parent_id: str
    at_entry: int
    outcome: ForkOutcome
    anchor_entry: int | None = None
    parent_session_id: str | None = None
    decided_at: float
    reason: str | None = None  #: why, in words an operator reads in the status view


class CloneStage(StrEnum):
    """How far a child's clone of its parent has come (``delivery.clone``)."""

    PREPARED = "prepared"  #: intent written; no clone request sent yet
    CLONING = "cloning"  #: a clone request may have been sent; look before cloning again
    CLONED = "cloned"  #: the clone's id is known


class CloneIntent(BaseModel):
    """A clone under way, in the child's ledger before any clone call, so a worker killed
    at any step resumes it instead of cloning twice.

    Stored as strings only (``anchor_entry`` and ``at`` too, as they always were), so every
    ledger written before or after reads the same; ``clone_session_id`` only once known.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    parent_session_id: str
    anchor_entry: int  #: the child's fork entry's anchor in the parent
    anchor_message_id: str  #: the parent's Honcho message the clone is cut at
    tag: str  #: unique: marks the parent, then the clone, so a lost clone is found again
    stage: CloneStage
    at: float  #: Unix seconds the stage was entered
    clone_session_id: str | None = None

    @model_serializer(mode="plain")
    def _as_strings(self) -> dict[str, str]:
        stored = {
            "parent_session_id": self.parent_session_id,
            "anchor_entry": str(self.anchor_entry),
            "anchor_message_id": self.anchor_message_id,
            "tag": self.tag,
            "stage": str(self.stage),
            "at": repr(self.at),
        }
        if self.clone_session_id is not None:
            stored["clone_session_id"] = self.clone_session_id
        return stored


class Ledger(BaseModel):
    """What Honcho holds of one conversation: ``state/ledger/<conversation>.json``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    conversation_id: str
    owner: str | None = None
    session_id: str | None = None
    delivered_seq: int = 0  #: every outbox record with seq <= this is delivered
    delivered_batches: list[str] = Field(default_factory=list)  #: newest last, windowed
    #: content digest of each batch in ``delivered_batches`` that has one, so a run id
    #: captured again with other content is refused (RunConflict) even after compaction
    delivered_digests: dict[str, str] = Field(default_factory=dict)
    in_flight: list[str] = Field(default_factory=list)  #: outbox message ids of the open send
    #: when the open send began (wall clock, comparable across processes); None on a ledger
    #: written before this was recorded: the mark is then fenced from when it is found
    in_flight_since: float | None = None
    #: outbox message ids already delivered of the first record past ``delivered_seq`` (a
    #: record split across two calls), so a resumed delivery never sends them again
    delivered_partial: list[str] = Field(default_factory=list)
    anchors: list[tuple[int, str]] = Field(default_factory=list)  #: (entry id, Honcho message id)
    messages_delivered: int = 0
    first_delivered_at: float | None = None
    last_delivered_at: float | None = None
    fork: ForkDecision | None = None
    clone_intent: CloneIntent | None = None  #: written before a clone call
    #: the newest failed delivery ``{code, message, at}``; cleared by the next success
    last_error: dict[str, Any] | None = None
    #: Honcho failures in a row with no message delivered between them (the delivery task
    #: gives up at ``tasks.DELIVER_MAX_FAILURES``; the sweep re-drives the records later)
    failures: int = 0


class Snapshot(BaseModel):
    """What one representation refresh fetched for a conversation (``memory``): the store keeps
    it (``cache/representations/<key>.json`` on the files), ``sections`` renders it."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    conversation_id: str
    workspace_id: str
    user_peer_id: str
    agent_peer_id: str
    session_id: str | None = None
    representation: str = ""  #: the agent's view of the user, across conversations
    summary: str | None = None  #: Honcho's summary of this conversation's session
    peer_card: list[str] | None = None  #: the agent's card of the user
    context_tokens: int  #: the budget it was fetched for
    fetched_at: float  #: Unix seconds when Honcho answered


class OutboxMessage(TypedDict, total=False):
    """One message of a record, in delivery order (``capture.build_messages``)."""

    id: str  #: ``<batch_id>-<index>``: the outbox id Honcho's copy carries for dedup
    role: str  #: ``user`` or ``agent``
    entry_id: int  #: the host's transcript entry
    text: str
    meta: dict[str, Any]  #: Honcho message metadata (entry, run, part of parts, unanswered)


class Record(TypedDict, total=False):
    """One outbox line's JSON, as ``capture.build_record`` made it and the outbox numbered it.

    A plain dict at run time (a capture encodes it once, with no model in between); the keys
    are all optional because a line read from disk is checked only for its ``seq``, a mark line
    (``{"seq": N, "mark": true}``) has nothing else, and dead letters and replays add theirs.
    """

    seq: int  #: grows within the conversation; the ledger's ``delivered_seq`` compares to it
    mark: bool  #: a compaction mark: keeps ``seq`` from going back, delivers nothing
    batch_id: str  #: stable per run (``capture.batch_id``): a second capture is a duplicate
    conversation_id: str
    owner: str | None
    user_peer_id: str
    run_id: str
    captured_at: float  #: Unix seconds; starts the retention clock
    #: when the run happened (UTC ISO 8601), when the host said; Honcho's ``created_at``
    happened_at: str
    session_metadata: dict[str, str]  #: the run's session metadata, when it had some
    messages: list[OutboxMessage]
    replayed_at: float  #: set by a replay from the dead letters: restarts the clock
    dead_at: float  #: in a dead-letter file only
    dead_reason: str  #: in a dead-letter file only
    digest: str  #: the run's content digest (``capture.content_digest``): same id, other content
    redactions: int  #: secrets replaced at capture; present only when not 0
