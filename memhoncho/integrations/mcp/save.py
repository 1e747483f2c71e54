"""The save tool: one turn of a conversation, captured through the outbox like any host's run.

A turn is the user's text and the assistant's answer, or a list of messages: the user's, then
the assistant's (one answer, perhaps in several blocks). It becomes one ``RunEvent`` and one
``Host.capture``, so the tool answers only once the turn is fsynced, and a turn is all or
nothing. Exactly once rests on the run id: the client's, else a digest of the turn's messages,
so a client that retries a call whose answer it lost stores the turn once.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from memhoncho.errors import InvalidToolCall
from memhoncho.integrations.mcp import scope
from memhoncho.models import MAX_INPUTS, MAX_RUN_ID_LEN, CaptureStatus
from memhoncho.recall.arguments import ToolArguments, parameters_schema, parse_arguments

if TYPE_CHECKING:
    from memhoncho.capture.host import Host

SAVE = "honcho_save"
DERIVED_RUN_PREFIX = "mcp-"  # a run id the server derived, not one the client passed
DERIVED_RUN_DIGEST_CHARS = 32  # hex characters of the turn's digest in a derived run id
USER = "user"
ASSISTANT = "assistant"

DESCRIPTION = (
    "Save one turn of this conversation to long-term memory: the user's message and your "
    "answer (user, assistant), or the turn as messages (the user's, then yours). It is stored "
    "durably before this returns and reaches memory in the background, in order, exactly "
    "once: calling again with the same turn (or the same run_id) stores nothing new. Pass "
    "run_id when the same words may really be said twice in a conversation."
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
        min_length=1,
        max_length=scope.MAX_CONVERSATION_CHARS,
        description="The conversation this turn belongs to. Omit for the server's default.",
    )
    run_id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_RUN_ID_LEN,
        description="A stable id of this turn (your message id, say). Omit to derive one "
        "from the turn's content.",
    )


def schema() -> dict[str, Any]:
    """The save tool's input schema, made from the same model that checks its calls."""
    return parameters_schema(SaveArguments)


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


def derived_run_id(turn: list[tuple[str, str]]) -> str:
    """The run id of a turn the client gave none for: the same turn, the same id."""
    payload = json.dumps(turn, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
    return DERIVED_RUN_PREFIX + digest[:DERIVED_RUN_DIGEST_CHARS]


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
    run_id = args.run_id if args.run_id is not None else derived_run_id(turn)
    result = host.capture(run_event(owner, stored, run_id, turn))
    kept = result.status in (CaptureStatus.CAPTURED, CaptureStatus.DUPLICATE)
    return {
        "status": str(result.status),
        "saved": kept,
        "conversation_id": conversation,
        "run_id": run_id,
        "about": _ABOUT[result.status],
    }


_ABOUT = {
    CaptureStatus.CAPTURED: "Stored durably; it reaches memory in the background.",
    CaptureStatus.DUPLICATE: "This turn was saved before; nothing new was stored.",
    CaptureStatus.EMPTY: "Every text of the turn was blank; nothing was stored.",
    CaptureStatus.NOT_SELECTED: "Nothing was stored.",
}
