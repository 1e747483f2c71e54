"""memhoncho in pydantic-ai, as one capability: ``pip install 'memhoncho[pydantic-ai]'``.

``HonchoMemory`` is a pydantic-ai capability (its extension point for behaviour that brings
instructions, tools and run hooks together): its instructions are the sections, read from the
local snapshot per model request; its toolset is the recall tools bound to the owner; its
``wrap_run`` captures the finished run as one memhoncho run. The run's message history stays
pydantic-ai's (``message_history=`` in, ``result.all_messages()`` out); memhoncho only reads it.

    memory = HonchoMemory(host, owner="ana@example.com")
    result = await agent.run(prompt, message_history=history, capabilities=[memory])

The conversation is pydantic-ai's own ``conversation_id`` (carried on the history) unless one
is given; the run id derives from pydantic-ai's ``run_id`` and the answer, so a run retried with
the same ``run_id`` and history is stored once, and one that answered differently is a new turn.

Entry ids: the message at index ``i`` of the history is entry ``2i + 1``; the input of a run
that failed never enters the history, and is entry ``2i`` (``i`` where it would have landed),
so it and the next run's input, which lands at the same index, have distinct entry ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CachePoint,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelResponse,
    TextContent,
    UploadedFile,
    VideoUrl,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import FunctionToolset

from memhoncho.capture.host import Host
from memhoncho.integrations import bridge

FRAMEWORK = "pydantic-ai"


@dataclass
class HonchoMemory(AbstractCapability[Any]):
    """memhoncho's memory for a pydantic-ai agent: sections, recall tools, capture.

    Give it to the agent (``Agent(..., capabilities=[memory])``) for one user, or per run
    (``agent.run(..., capabilities=[memory])``) when the owner changes from run to run.
    """

    host: Host
    owner: str | None
    #: the memhoncho conversation; None: pydantic-ai's ``conversation_id`` of the run
    conversation_id: str | None = None
    #: where recall tools run: ``process`` (here) or ``celery`` (a recall worker)
    via: str = "process"
    _toolset: FunctionToolset[Any] | None = field(default=None, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a Host: not spec-serializable

    def get_instructions(self) -> Any:
        """The sections, rendered per model request from the local snapshot."""

        def sections(ctx: RunContext[Any]) -> str:
            return bridge.prompt_text(self.host, self._conversation(ctx))

        return sections

    def get_toolset(self) -> FunctionToolset[Any]:
        """The recall tools bound to the owner (built once: read again for every run)."""
        if self._toolset is None:
            tools = bridge.OwnerTools(self.host, self.owner, self.via)
            self._toolset = FunctionToolset(
                [
                    Tool.from_schema(
                        _caller(tools, spec.name), spec.name, spec.description, spec.parameters
                    )
                    for spec in bridge.recall_tools(self.host)
                ]
            )
        return self._toolset

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Capture the run once it ended: answered, or not answered and the error re-raised."""
        start = len(ctx.messages)  # the new run's first message lands here
        prompt = _inputs(ctx.prompt)  # UnmappableMessage before any model call
        try:
            result = await handler()
        except BaseException:  # an error or a cancellation: still one run, not answered
            failed = _entries(prompt, _failed_entry(start))
            bridge.capture_failed(self.host, lambda: self._turn(ctx, failed, None))
            raise
        messages = result.all_messages()
        last = _last_response(messages, start)
        answer = bridge.Entry(_history_entry(last), bridge.answer_text(result.output))
        inputs = _entries(prompt, _history_entry(start))
        turn = replace(self._turn(ctx, inputs, answer), happened_at=_started(messages, start))
        bridge.capture(self.host, turn)
        return result

    def _conversation(self, ctx: RunContext[Any]) -> str | None:
        return self.conversation_id or ctx.conversation_id

    def _turn(
        self, ctx: RunContext[Any], inputs: tuple[bridge.Entry, ...], answer: bridge.Entry | None
    ) -> bridge.Turn:
        conversation = self._conversation(ctx)
        if conversation is None or ctx.run_id is None:
            raise bridge.unmappable(FRAMEWORK, "a run without conversation or run id", ctx)
        return bridge.Turn(FRAMEWORK, conversation, self.owner, ctx.run_id, inputs, answer)


def _caller(tools: bridge.OwnerTools, name: str) -> Any:
    def call(**arguments: Any) -> dict[str, Any]:
        return tools.call(name, arguments)

    call.__name__ = name
    return call


#: multi-modal content pydantic-ai knows, by the kind its note names
_MEDIA: tuple[tuple[type, str], ...] = (
    (ImageUrl, "image"),
    (AudioUrl, "audio"),
    (VideoUrl, "video"),
    (DocumentUrl, "document"),
    (UploadedFile, "file"),
)


def _history_entry(index: int) -> int:
    """The entry id of the history's message at ``index`` (odd: see the module's note)."""
    return 2 * index + 1


def _failed_entry(index: int) -> int:
    """The entry id of a failed run's input, which would have landed at ``index`` (even)."""
    return 2 * index


def _entries(text: str | None, entry_id: int) -> tuple[bridge.Entry, ...]:
    return () if text is None else (bridge.Entry(entry_id, text),)


def _inputs(prompt: str | Sequence[Any] | None) -> str | None:
    """The run's new user input as text: text parts kept, media noted, anything else refused."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return prompt
    texts: list[str] = []
    dropped: list[str] = []
    for part in prompt:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, TextContent):
            texts.append(part.content)
        elif isinstance(part, CachePoint):
            continue  # a provider's cache marker: no content
        elif isinstance(part, BinaryContent):
            dropped.append(_binary_kind(part))
        else:
            kind = next((k for cls, k in _MEDIA if isinstance(part, cls)), None)
            if kind is None:
                raise bridge.unmappable(FRAMEWORK, "a user prompt part", part)
            dropped.append(kind)
    return bridge.joined(texts, dropped)


def _binary_kind(part: BinaryContent) -> str:
    for kind in ("image", "audio", "video"):
        if getattr(part, f"is_{kind}", False):
            return kind
    return "file"


def _started(messages: Sequence[ModelMessage], start: int) -> datetime | None:
    """When the run began: its first new request's timestamp (pydantic-ai's, aware UTC)."""
    if start < len(messages):
        when = getattr(messages[start], "timestamp", None)
        if isinstance(when, datetime) and when.tzinfo is not None:
            return when
    return None


def _last_response(messages: Sequence[ModelMessage], start: int) -> int:
    """The history index of the run's last model response: the answer's entry id."""
    for index in range(len(messages) - 1, start - 1, -1):
        if isinstance(messages[index], ModelResponse):
            return index
    return max(start, len(messages) - 1)
