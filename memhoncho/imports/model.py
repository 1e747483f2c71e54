"""What every export reader yields: a conversation's runs, each a prompt and its answer with
the time it happened, and the rule that pairs an export's messages into runs.

Pure data, no I/O. A run's id comes from the export's own message id, so importing the same
export twice, or a longer one later, captures the same runs again (``duplicate``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

USER = "user"
ASSISTANT = "assistant"


@dataclass(frozen=True)
class Message:
    """One message of an export, already reduced to text (None: nothing to store)."""

    role: str  #: ``user`` or ``assistant``
    id: str  #: the export's id of the message: the run id of a prompt
    text: str | None
    at: float | str | None = None  #: when it was written (Unix seconds or ISO 8601)


@dataclass(frozen=True)
class Run:
    """One imported run: a prompt and the answer it got (None: never answered)."""

    conversation_id: str
    run_id: str
    ordinal: int  #: the run's place in its conversation: entries ``2n``, ``2n + 1``
    prompt: str
    answer: str | None
    happened_at: float | str | None

    def event(self, owner: str | None) -> dict[str, Any]:
        """The run as ``Host.capture`` takes it."""
        outcome: dict[str, Any] = {"status": "unanswered"}
        if self.answer is not None:
            content = [{"type": "text", "text": self.answer}]
            outcome = {
                "status": "answered",
                "answer": {"entry_id": 2 * self.ordinal + 1, "content": content},
            }
        event: dict[str, Any] = {
            "conversation_id": self.conversation_id,
            "owner": owner,
            "run_id": self.run_id,
            "inputs": [{"entry_id": 2 * self.ordinal, "text": self.prompt}],
            "outcome": outcome,
        }
        if self.happened_at is not None:
            event["happened_at"] = self.happened_at
        return event


@dataclass
class Conversation:
    """One conversation read from an export: its runs, and what was left out and why."""

    format: str
    conversation_id: str
    where: str  #: where it is in the export (a line, an index), for reports
    runs: list[Run] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  #: reason -> messages left out
    #: (parent conversation, entry) this one continues from: a resumed Claude Code session
    fork: tuple[str, int] | None = None

    def skip(self, reason: str, count: int = 1) -> None:
        if count > 0:
            self.skipped[reason] = self.skipped.get(reason, 0) + count


def pair(conversation: Conversation, messages: Iterable[Message], run_prefix: str) -> None:
    """Each user message starts a run; its answer is the last assistant text before the next
    user message (an assistant turn split by tool calls answers once, with its final words).
    Assistant text before any prompt (a greeting, a custom GPT's opener) is left out."""
    prompt: Message | None = None
    answer: Message | None = None
    for message in _with_text(conversation, messages):
        if message.role == USER:
            if prompt is not None:
                _add(conversation, prompt, answer, run_prefix)
            prompt, answer = message, None
        elif prompt is None:
            conversation.skip("assistant text before any prompt")
        else:
            answer = message
    if prompt is not None:
        _add(conversation, prompt, answer, run_prefix)


def _with_text(conversation: Conversation, messages: Iterable[Message]) -> Iterator[Message]:
    for message in messages:
        if message.text is None or not message.text.strip():
            conversation.skip(f"{message.role} message without text")
            continue
        yield message


def _add(conversation: Conversation, prompt: Message, answer: Message | None, prefix: str) -> None:
    conversation.runs.append(
        Run(
            conversation_id=conversation.conversation_id,
            run_id=prefix + prompt.id,
            ordinal=len(conversation.runs),
            prompt=str(prompt.text),
            answer=answer.text if answer is not None else None,
            happened_at=prompt.at,
        )
    )
