"""Pydantic models of what crosses memhoncho's boundaries: the host's runs and the ledger.

Inputs are strict (no coercion of wrong types, unknown keys refused) so a malformed event is
refused before anything is written.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

MAX_RUN_ID_LEN = 256  # characters
MAX_INPUTS = 1000  # user inputs in one run


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class UserInput(_Strict):
    """One user input of the run, in admission order."""

    entry_id: StrictInt = Field(ge=0)
    text: StrictStr


class ContentBlock(BaseModel):
    """A block of the answer; only ``text`` blocks are delivered, others are ignored."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

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


class CaptureStatus(StrEnum):
    """What ``capture`` did with a run."""

    CAPTURED = "captured"  #: appended to the outbox and fsynced
    DUPLICATE = "duplicate"  #: this run was captured before; nothing written
    NOT_SELECTED = "not-selected"  #: the run's selection excludes memhoncho; nothing written
    EMPTY = "empty"  #: nothing left to deliver after skipping empty texts; nothing written


class CaptureResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: CaptureStatus
    batch_id: str | None = None
    enqueued: bool = False
    #: secrets replaced by ``[REDACTED]`` in this run's texts before it was written (captured
    #: runs only; the count, never what was replaced)
    redactions: int = 0


class RecordState(StrEnum):
    """Where an outbox record is in its life."""

    PENDING = "pending"  #: on disk, not yet known to Honcho
    IN_FLIGHT = "in-flight"  #: a send began; Honcho may or may not hold it
    DELIVERED = "delivered"  #: Honcho holds every message of the batch
    DEAD = "dead"  #: past retention, moved to the dead-letter file


class ForkDecision(BaseModel):
    """How a forked conversation's Honcho session began, and why."""

    parent_id: str
    at_entry: int
    outcome: Literal["clone", "none-window", "none-empty", "none-unknown-parent", "none-timeout"]
    anchor_entry: int | None = None
    parent_session_id: str | None = None
    decided_at: float
    reason: str | None = None  #: why, in words an operator reads in the status view


class Ledger(BaseModel):
    """What Honcho holds of one conversation: ``state/ledger/<conversation>.json``."""

    model_config = ConfigDict(extra="ignore")

    conversation_id: str
    owner: str | None = None
    session_id: str | None = None
    delivered_seq: int = 0  #: every outbox record with seq <= this is delivered
    delivered_batches: list[str] = Field(default_factory=list)  #: newest last, windowed
    #: content digest of each batch in ``delivered_batches`` that has one, so a run id
    #: captured again with other content is refused (RunConflict) even after compaction
    delivered_digests: dict[str, str] = Field(default_factory=dict)
    in_flight: list[str] = Field(default_factory=list)  #: outbox message ids of the open send
    #: outbox message ids already delivered of the first record past ``delivered_seq`` (a
    #: record split across two calls), so a resumed delivery never sends them again
    delivered_partial: list[str] = Field(default_factory=list)
    anchors: list[tuple[int, str]] = Field(default_factory=list)  #: (entry id, Honcho message id)
    messages_delivered: int = 0
    first_delivered_at: float | None = None
    last_delivered_at: float | None = None
    fork: ForkDecision | None = None
    clone_intent: dict[str, str] | None = None  #: written before a clone call
    #: the newest failed delivery ``{code, message, at}``; cleared by the next success
    last_error: dict[str, Any] | None = None
