"""The save tool: one turn of a conversation, captured through the outbox like any host's run.

A turn is the user's text and the assistant's answer, or a list of messages: the user's, then
the assistant's (one answer, perhaps in several blocks). It becomes one ``RunEvent`` and one
``Host.capture``, so the tool answers only once the turn is fsynced, and a turn is all or
nothing. Exactly once rests on the run id: the client's, else one derived from the turn and the
save before it (turn_ids.py), so a client that retries a call whose answer it lost stores the
turn once, and the same words said again later are kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memhoncho import ids
from memhoncho.capture.hint_word import hint_word, stalled
from memhoncho.errors import InvalidToolCall
from memhoncho.integrations.mcp import scope, turn_ids
from memhoncho.models import MAX_INPUTS, MAX_RUN_ID_LEN, CaptureStatus
from memhoncho.recall.arguments import ToolArguments, parameters_schema, parse_arguments

if TYPE_CHECKING:
    from memhoncho.capture.host import Host

SAVE = "honcho_save"
USER = "user"
ASSISTANT = "assistant"

DESCRIPTION = (
    "Save one turn of this conversation to long-term memory: the user's message and your "
    "answer (user, assistant), or the turn as messages (the user's, then yours). It is stored "
    "durably before this returns and reaches memory in the background, in order, exactly "
    "once: calling again with the same turn right away (or the same run_id) stores nothing "
    "new, while the same words said again after other turns are a new turn. Pass run_id "
    "when the very same turn may really be said twice in a row."
)


class TurnMessage(ToolArguments):
    """One message of the turn."""

    role: Literal["user", "assistant"] = Field(description="Who said it.")
    content: str = Field(description="What was said, as plain text.")


class SaveArguments(ToolArguments):
    """One turn to save."""

    user: str | None = Field(None, description="The user's message of this turn.")
    assistant: str | None = Field(None, description="Your answer to it.")
    messages: list[TurnMessage] | None = Field(
        None,
        min_length=1,
        max_length=MAX_INPUTS,
        description="The turn as messages instead of user/assistant: the user's messages, "
        "then your answer (several assistant messages are joined into one answer).",
    )
    conversation_id: str | None = Field(
        None,
        description="The conversation this turn belongs to. Omit for the server's default.",
    )
    run_id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_RUN_ID_LEN,
        description="A stable id of this turn (your message id, say). Omit, and a save that "
        "repeats this conversation's latest save is taken as its retry.",
    )


class SaveAnswer(BaseModel):
    """What the save tool answers (its output schema)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["captured", "duplicate", "empty", "not-selected"] = Field(
        description="What was done with the turn."
    )
    saved: bool = Field(description="The turn is stored (now, or by an earlier call).")
    conversation_id: str = Field(description="The conversation the turn was saved in.")
    run_id: str = Field(description="The turn's run id (given, or derived from the turn).")
    hint: str | None = Field(
        description="What became of the turn's delivery hint, as memhoncho capture prints it: "
        "published, waiting, relay, or no-key / broker-down (nothing moves until an API key "
        "is configured or the broker is back); null when nothing was stored."
    )
    about: str = Field(description="The answer in words.")


def schema() -> dict[str, Any]:
    """The save tool's input schema, made from the same model that checks its calls."""
    return parameters_schema(SaveArguments)


def output_schema() -> dict[str, Any]:
    """The save tool's output schema, made from the model of its answer."""
    return SaveAnswer.model_json_schema()


def turn_of(args: SaveArguments) -> list[tuple[str, str]]:
    """The turn's (role, text) in order; InvalidToolCall for an empty or interleaved turn."""
    pair = args.user is not None or args.assistant is not None
    if pair and args.messages is not None:
        raise InvalidToolCall(
            f"memhoncho {SAVE}: give user/assistant or messages, not both",
            problems=["messages is given with user/assistant"],
        )
    turn: list[tuple[str, str]]
    if args.messages is not None:
        turn = [(m.role, m.content) for m in args.messages]
    else:
        given = ((USER, args.user), (ASSISTANT, args.assistant))
        turn = [(role, text) for role, text in given if text is not None]
    if not turn:
        raise InvalidToolCall(
            f"memhoncho {SAVE}: nothing to save: give user and/or assistant, or messages",
            problems=["user, assistant or messages is required"],
        )
    roles = [role for role, _ in turn]
    if ASSISTANT in roles and USER in roles[roles.index(ASSISTANT) :]:
        raise InvalidToolCall(
            f"memhoncho {SAVE}: a turn is the user's messages, then the answer; "
            "save each turn in its own call",
            problems=["messages has a user message after an assistant message"],
        )
    return turn


def run_event(
    owner: str | None, conversation_id: str, run_id: str, turn: list[tuple[str, str]]
) -> dict[str, Any]:
    """The turn as a host's settled run: entries numbered from 0 within the turn (MCP offers
    no fork, the one use of entry ids across turns), answered when the assistant spoke."""
    inputs = [{"entry_id": n, "text": text} for n, (role, text) in enumerate(turn) if role == USER]
    blocks = [{"type": "text", "text": text} for role, text in turn if role == ASSISTANT]
    outcome: dict[str, Any] = {"status": "unanswered"}
    if blocks:
        outcome = {"status": "answered", "answer": {"entry_id": len(inputs), "content": blocks}}
    return {
        "conversation_id": conversation_id,
        "owner": owner,
        "run_id": run_id,
        "inputs": inputs,
        "outcome": outcome,
    }


def save(
    host: Host, owner: str | None, default_conversation: str, arguments: Any
) -> dict[str, Any]:
    """Capture the turn for ``owner``; returns once it is durable (or refused, nothing written)."""
    args = parse_arguments(SAVE, SaveArguments, arguments)
    turn = turn_of(args)
    conversation = (
        args.conversation_id if args.conversation_id is not None else default_conversation
    )
    stored = scope.scoped(owner, conversation)
    run_id = args.run_id
    if run_id is None:  # a retry only when it repeats the latest save (turn_ids.py)
        key = ids.conversation_key(stored)
        run_id = turn_ids.derived_run_id(host.deployment.store(), key, stored, turn)
    result = host.capture(run_event(owner, stored, run_id, turn))
    kept = result.status in (CaptureStatus.CAPTURED, CaptureStatus.DUPLICATE)
    word = hint_word(result)
    about = _ABOUT[result.status]
    if stalled(word):
        about = f"{about} {_STALLED}"
    answer = SaveAnswer(
        status=result.status.value,
        saved=kept,
        conversation_id=conversation,
        run_id=run_id,
        hint=word,
        about=about,
    )
    return answer.model_dump()


#: said with a hint word in ``hint_word.STALLED``: durable, but nothing moves yet
_STALLED = (
    "Nothing moves to memory until an API key is configured or the broker is back (hint);"
    " the turn waits on disk until then."
)
_ABOUT = {
    CaptureStatus.CAPTURED: "Stored durably; it reaches memory in the background.",
    CaptureStatus.DUPLICATE: "This turn was saved before; nothing new was stored.",
    CaptureStatus.EMPTY: "Every text of the turn was blank; nothing was stored.",
    CaptureStatus.NOT_SELECTED: "Nothing was stored.",
}
