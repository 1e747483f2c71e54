"""What every framework integration shares, written once: a finished framework run as one
memhoncho run (``Turn`` -> ``RunEvent``, its deterministic run id), the rule for content that is
not text, the recall tools bound to an owner, and the sections as prompt text.

The framework modules only translate their own message shapes into ``Turn`` and wire these
pieces into the framework's extension points; nothing here imports a framework.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from memhoncho.capture.hint_word import hint_word, stalled
from memhoncho.errors import MemhonchoError, UnmappableMessage
from memhoncho.models import CaptureResult, RunEvent

if TYPE_CHECKING:
    from memhoncho.capture.host import Host

log = logging.getLogger(__name__)

RUN_DIGEST_CHARS = 40  # hex characters of the run id's hash: collisions are out of reach
TEXT_DIGEST_CHARS = 16  # hex characters of the input texts' hash in a position identity
PART_JOINER = "\n"  # between the kept parts of one multi-part message
#: what stands in a stored text for a part that is not text (an image, a file, audio)
DROPPED_NOTE = "[{kind} not stored: memhoncho keeps text only]"


@dataclass(frozen=True)
class Entry:
    """One message of the framework's history: its position there and its text."""

    entry_id: int
    text: str


@dataclass(frozen=True)
class Turn:
    """One finished framework run, as memhoncho stores it.

    ``identity`` is the framework's own name for this run (its run id, or the position of the
    run's first new input with a digest of the inputs): the same run always yields the same one.
    ``answer`` is None when the framework ended the run with an error or a cancellation.
    """

    framework: str
    conversation_id: str
    owner: str | None
    identity: str
    inputs: tuple[Entry, ...]
    answer: Entry | None
    #: when the run happened, where the framework says (Honcho's ``created_at``; not in the
    #: run id, so a retried capture with another time is still a duplicate)
    happened_at: datetime | None = None

    @property
    def run_id(self) -> str:
        """Derived, never drawn: capturing this run again answers ``duplicate``. The outcome
        and the answer are part of it: a failed run and the retry that answered it are two
        runs, and so is a replay the model answered differently (a new turn of the
        conversation, appended: never a conflict raised after the model answered)."""
        outcome = "unanswered"
        if self.answer is not None:
            outcome = "answered:" + hashlib.sha256(self.answer.text.encode("utf-8")).hexdigest()
        key = "\x00".join((self.framework, self.conversation_id, self.identity, outcome))
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:RUN_DIGEST_CHARS]
        return f"{self.framework}-{digest}"

    def event(self) -> RunEvent:
        """The ``RunEvent`` ``Host.capture`` takes (InvalidEvent for a bad id, as any run)."""
        outcome: dict[str, Any] = {"status": "unanswered"}
        if self.answer is not None:
            outcome = {
                "status": "answered",
                "answer": {
                    "entry_id": self.answer.entry_id,
                    "content": [{"type": "text", "text": self.answer.text}],
                },
            }
        return RunEvent.model_validate(
            {
                "conversation_id": self.conversation_id,
                "owner": self.owner,
                "run_id": self.run_id,
                "inputs": [{"entry_id": e.entry_id, "text": e.text} for e in self.inputs],
                "outcome": outcome,
                "happened_at": self.happened_at,
            }
        )


def position_identity(inputs: Iterable[Entry]) -> str:
    """A run's identity for a framework that names none: where its first new input sits in the
    conversation's history, and what its inputs say (two runs at one position differ by text)."""
    entries = list(inputs)
    first = entries[0].entry_id if entries else -1
    texts = json.dumps([e.text for e in entries], ensure_ascii=False)
    digest = hashlib.sha256(texts.encode("utf-8")).hexdigest()[:TEXT_DIGEST_CHARS]
    return f"{first}:{digest}"


def capture(host: Host, turn: Turn) -> CaptureResult:
    """Capture the turn: durable before this returns, a second capture answers ``duplicate``."""
    result = host.capture(turn.event())
    log.debug(
        "framework run captured",
        extra={"action": "framework_run_captured", "framework": turn.framework},
    )
    _tell_stalled(host, hint_word(result), turn.framework)
    return result


#: per host, the stalled hint words already logged; a capture that moves ends the episode
_told: weakref.WeakKeyDictionary[Host, set[str]] = weakref.WeakKeyDictionary()
_told_lock = threading.Lock()


def _tell_stalled(host: Host, word: str | None, framework: str) -> None:
    """Log once per cause that a host's captured runs will not move (``no-key``,
    ``broker-down``), not at every run; again if it comes back after a capture that moved."""
    with _told_lock:
        told = _told.setdefault(host, set())
        if word is None or word in told:
            return
        if not stalled(word):
            told.clear()
            return
        told.add(word)
    log.warning(
        "captured runs wait on disk: nothing reaches Honcho until %s",
        "an API key is configured" if word == "no-key" else "the broker is back",
        extra={"action": "capture_stalled", "hint": word, "framework": framework},
    )


def capture_failed(host: Host, turn: Callable[[], Turn]) -> None:
    """Capture a run the framework ended with an error, as not answered. A turn that cannot be
    built or captured is logged, never raised: the framework's own exception is what reaches
    the caller."""
    try:
        capture(host, turn())
    except MemhonchoError as exc:
        log.warning(
            "the failed run could not be captured",
            extra={"action": "framework_failed_run_not_captured", "code": exc.code},
        )


# ---------------------------------------------------------------------------------- content


def joined(texts: Iterable[str], dropped: Iterable[str] = ()) -> str:
    """The text of a multi-part message: its text parts in order, then one note per part that
    is not text (named by kind, never by content), so memory knows something was shared."""
    parts = [t for t in texts if t]
    parts += [DROPPED_NOTE.format(kind=kind) for kind in dropped]
    return PART_JOINER.join(parts)


def parts_text(
    framework: str,
    where: str,
    parts: Iterable[Any],
    text_kinds: Collection[str],
    media: Mapping[str, str],
    *,
    bare_strings: bool = False,
) -> str:
    """The text of a message's content parts (dicts with a ``type``): the parts of
    ``text_kinds`` kept (and plain strings, where the framework allows them), the ``media``
    kinds noted by the kind they map to, any other part refused as ``where``."""
    texts: list[str] = []
    dropped: list[str] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if bare_strings and isinstance(part, str):
            texts.append(part)
        elif kind in text_kinds and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(kind, str) and kind in media:
            dropped.append(media[kind])
        else:
            raise unmappable(framework, where, part)
    return joined(texts, dropped)


def unmappable(framework: str, where: str, shape: object) -> UnmappableMessage:
    """The typed refusal of a message shape the integration does not know (only its type is
    named: never its content)."""
    kind = type(shape).__name__
    if isinstance(shape, dict):
        kind = f"dict type={str(shape.get('type') or shape.get('role'))[:40]!r}"
    return UnmappableMessage(
        f"memhoncho's {framework} integration cannot map {where} of shape {kind}; "
        "nothing was written",
        framework=framework,
        where=where,
        shape=kind,
    )


def answer_text(output: Any) -> str:
    """A run's final output as text: a string as it is, anything structured as its JSON."""
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    return json.dumps(output, ensure_ascii=False, default=str)


# ----------------------------------------------------------------------- recall and prompt


@dataclass(frozen=True)
class RecallTool:
    """One recall tool as a framework tool is built from it: name, description, schema."""

    name: str
    description: str
    parameters: dict[str, Any]


def recall_tools(host: Host) -> list[RecallTool]:
    """The recall tools (search, chat, remember) from ``Host.tool_definitions``."""
    return [
        RecallTool(d["function"]["name"], d["function"]["description"], d["function"]["parameters"])
        for d in host.tool_definitions()
    ]


@dataclass(frozen=True)
class OwnerTools:
    """The recall tools bound to one owner by the integration: the model's arguments never
    name an owner, so it cannot reach another user's memory."""

    host: Host
    owner: str | None
    via: str = "process"

    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        """The tool's result, or ``{"error": {code, message, ...}}`` for a typed recall error:
        the model reads the failure as a result, the run goes on."""
        from memhoncho.recall.tools import error_payload

        try:
            return self.host.call_tool(name, arguments, owner=self.owner, via=self.via)
        except MemhonchoError as exc:
            return {"error": error_payload(exc)}

    def call_json(self, name: str, arguments: Any) -> str:
        """``call`` as the JSON text frameworks hand back to the model."""
        return json.dumps(self.call(name, arguments), ensure_ascii=False, default=str)


def prompt_text(host: Host, conversation_id: str | None) -> str:
    """The sections as prompt text, from the local snapshot only ("" when there is none)."""
    if conversation_id is None:
        return ""
    return host.sections(conversation_id).render()


class FrameworkMemory:
    """What a framework's ``HonchoMemory`` holds: the host, the owner the recall tools are
    bound to, the conversation (None: the framework's own name for it, taken per run)."""

    framework: ClassVar[str]

    def __init__(
        self,
        host: Host,
        owner: str | None,
        conversation_id: str | None = None,
        *,
        via: str = "process",
    ) -> None:
        self.host = host
        self.owner = owner
        self.conversation_id = conversation_id
        self._tools = OwnerTools(host, owner, via)

    def _turn(self, conversation: str, inputs: tuple[Entry, ...], answer: Entry | None) -> Turn:
        """The run, named by its position (these frameworks give a run no id of their own)."""
        identity = position_identity(inputs)
        return Turn(self.framework, conversation, self.owner, identity, inputs, answer)
