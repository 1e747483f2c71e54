"""memhoncho in the OpenAI Agents SDK: ``pip install 'memhoncho[openai-agents]'``.

``HonchoMemory.run`` is ``Runner.run`` with memory: the agent is cloned (``Agent.clone``) with
dynamic instructions that add the sections, read from the local snapshot on every model call,
and with the recall tools as ``FunctionTool``s bound to the owner, and so is every agent it can
hand off to; the finished run is captured as one memhoncho run, and a run that raised is
captured as not answered and the error re-raised. ``HonchoMemory.run_streamed`` is
``Runner.run_streamed`` the same way, captured when its stream ends. The conversation's history
stays the SDK's (a ``Session``, the input list the caller keeps, or OpenAI's server-kept history
by ``previous_response_id``); memhoncho reads it to know where the new input sits, and never
writes to it.

    memory = HonchoMemory(host, owner="ana@example.com", conversation_id="support-42")
    result = await memory.run(agent, "Where did we leave off?", session=session)
    stream = await memory.run_streamed(agent, "And now?", session=session)
    async for event in stream.stream_events():
        ...
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    Session,
)
from agents.items import MessageOutputItem, RunItem
from agents.stream_events import StreamEvent
from agents.tool_context import ToolContext

from memhoncho.integrations import bridge

FRAMEWORK = "openai-agents"
#: user content parts the SDK's Responses input knows that are not text, by the kind noted
_MEDIA = {"input_image": "image", "input_file": "file", "input_audio": "audio"}
_TEXT = ("input_text", "text", "output_text")

Instructions = str | Callable[[RunContextWrapper[Any], Agent[Any]], Any] | None


class HonchoMemory(bridge.FrameworkMemory):
    """memhoncho's memory for one owner's conversation, around ``Runner.run``.
    ``conversation_id`` None: the session's ``session_id`` (``run`` then needs one)."""

    framework = FRAMEWORK
    _function_tools: list[FunctionTool] | None = None  # built on first use

    # ---- what the agent gets ------------------------------------------------------------

    def tools(self) -> list[FunctionTool]:
        """The recall tools as the SDK's function tools, bound to the owner (built once)."""
        if self._function_tools is None:
            self._function_tools = self._build_tools()
        return list(self._function_tools)

    def _build_tools(self) -> list[FunctionTool]:
        return [
            FunctionTool(
                name=spec.name,
                description=spec.description,
                params_json_schema=spec.parameters,
                on_invoke_tool=self._invoker(spec.name),
                strict_json_schema=False,  # optional arguments stay optional
            )
            for spec in bridge.recall_tools(self.host)
        ]

    def instructions(self, base: Instructions, conversation_id: str) -> Callable[..., Any]:
        """The agent's own instructions (text or callable) followed by the sections."""

        async def with_memory(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
            own = base(ctx, agent) if callable(base) else base
            if inspect.isawaitable(own):
                own = await own
            sections = bridge.prompt_text(self.host, conversation_id)
            return "\n\n".join(text for text in (own, sections) if text)

        return with_memory

    def agent(self, agent: Agent[Any], conversation_id: str) -> Agent[Any]:
        """A clone of ``agent`` with the sections in its instructions and the recall tools, and
        so every agent it can hand off to: the agent handed to has memory too (agents that
        hand back and forth stay one clone each)."""
        clones: dict[int, Agent[Any]] = {}

        def remembering(original: Agent[Any]) -> Agent[Any]:
            if id(original) not in clones:
                clone = original.clone(
                    instructions=self.instructions(original.instructions, conversation_id),
                    tools=[*original.tools, *self.tools()],
                )
                clones[id(original)] = clone
                clone.handoffs = [_handed(h, remembering) for h in original.handoffs]
            return clones[id(original)]

        return remembering(agent)

    def _invoker(self, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            # a recall tool waits on Honcho: off the event loop
            return await asyncio.to_thread(self._tools.call_json, name, arguments)

        return invoke

    # ---- the run ------------------------------------------------------------------------

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        session: Session | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, session=session, **kwargs)`` with memory, captured."""
        start = await self._start(input, session, kwargs.get("previous_response_id"))
        try:
            result = await Runner.run(
                self.agent(agent, start.conversation), input, session=session, **kwargs
            )
        except BaseException:  # an error or a cancellation: still one run, not answered
            self._settle(start, None)
            raise
        self._settle(start, result)
        return result

    async def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        session: Session | None = None,
        **kwargs: Any,
    ) -> CapturedStream:
        """``Runner.run_streamed(agent, input, session=session, **kwargs)`` with memory: the
        run is captured when ``stream_events()`` ends (awaited here: where the input sits in
        the session is read before the run starts)."""
        start = await self._start(input, session, kwargs.get("previous_response_id"))
        streamed = Runner.run_streamed(
            self.agent(agent, start.conversation), input, session=session, **kwargs
        )
        return CapturedStream(streamed, lambda done: self._settle(start, done))

    async def _start(
        self, input: str | list[Any], session: Session | None, chain: str | None
    ) -> _Start:
        """The conversation and the run's new inputs, mapped before the model is called."""
        conversation = self.conversation_id or (session.session_id if session else None)
        if conversation is None:
            raise bridge.unmappable(
                FRAMEWORK, "a run with no conversation_id and no session", input
            )
        if not isinstance(input, str | list):
            raise bridge.unmappable(FRAMEWORK, "a run's input (a resumed RunState)", input)
        before = len(await session.get_items()) if session is not None else 0
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        inputs = _new_inputs(items, before, whole_history=session is None)
        return _Start(conversation, inputs, before + len(items), chain)

    def _settle(self, start: _Start, result: RunResult | RunResultStreaming | None) -> None:
        """Capture the run: answered with ``result``, not answered without one (logged, never
        raised: the caller's own exception is what goes on)."""
        if result is None:
            bridge.capture_failed(self.host, lambda: self._chained(start, None))
            return
        answer = bridge.Entry(
            _answer_position(result.new_items, start.first_new),
            bridge.answer_text(result.final_output),
        )
        bridge.capture(self.host, self._chained(start, answer))

    def _chained(self, start: _Start, answer: bridge.Entry | None) -> bridge.Turn:
        """The run named by its position and, with OpenAI's server-kept history, by the
        response it follows: there every run's input sits at position 0, and words said twice
        in one conversation ("yes", turns apart) follow two different responses."""
        identity = bridge.position_identity(start.inputs)
        if start.chain is not None:
            identity = f"{identity}@{start.chain}"
        return bridge.Turn(
            FRAMEWORK, start.conversation, self.owner, identity, start.inputs, answer
        )


@dataclass(frozen=True)
class _Start:
    """A run before the SDK starts it: where it goes and what it adds."""

    conversation: str
    inputs: tuple[bridge.Entry, ...]
    first_new: int  #: where the run's first new item lands in the history
    chain: str | None  #: the ``previous_response_id`` it continues (server-kept history)


class CapturedStream:
    """``Runner.run_streamed``'s result, captured once when its events end: answered when the
    run completed; not answered when it failed, was cancelled, or the caller stopped reading
    (the SDK's run is then cancelled). Events reach the caller as the SDK yields them, and the
    caller's exception or cancellation goes on unchanged. Everything else is the SDK's
    ``RunResultStreaming`` (``stream.result``; its attributes are read through)."""

    def __init__(
        self, result: RunResultStreaming, settle: Callable[[RunResultStreaming | None], None]
    ) -> None:
        self.result = result
        self._settle = settle
        self._settled = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        events = cast(AsyncGenerator[StreamEvent, None], self.result.stream_events())
        completed = False
        try:
            async for event in events:
                yield event
            completed = self.result.is_complete and self.result.final_output is not None
        finally:
            try:
                if not completed:
                    self.result.cancel()  # abandoned or failed: the run stops, unanswered
                await events.aclose()
            finally:
                if not self._settled:
                    self._settled = True
                    self._settle(self.result if completed else None)


def _handed(
    target: Agent[Any] | Handoff[Any, Any], remembering: Callable[[Agent[Any]], Agent[Any]]
) -> Agent[Any] | Handoff[Any, Any]:
    """A handoff whose agent has memory: an ``Agent`` cloned, a ``Handoff`` made by
    ``handoff(...)`` kept as it is but the agent it hands to given memory when invoked."""
    if isinstance(target, Agent):
        return remembering(target)
    invoke = target.on_invoke_handoff

    async def to_remembering(ctx: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
        return remembering(await invoke(ctx, arguments))

    return dataclasses.replace(target, on_invoke_handoff=to_remembering)


def _new_inputs(
    items: Sequence[Any], before: int, *, whole_history: bool
) -> tuple[bridge.Entry, ...]:
    """The run's new user messages and their positions in the conversation's history.

    With a session the input is all new; without one it is the whole history the caller kept,
    and the new input is its trailing user messages. Other roles (system, developer) and the
    model's own items are not the user's words: not captured.
    """
    start = 0
    if whole_history:
        start = len(items)
        while start > 0 and _is_user(items[start - 1]):
            start -= 1
    entries = []
    for index in range(start, len(items)):
        item = items[index]
        if _is_user(item):
            entries.append(bridge.Entry(before + index, _user_text(item["content"])))
    return tuple(entries)


def _is_user(item: Any) -> bool:
    if not isinstance(item, dict) or not ("role" in item or "type" in item):
        raise bridge.unmappable(FRAMEWORK, "an input item", item)
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _user_text(content: Any) -> str:
    """A user message's text: text parts kept, images/files/audio noted, anything else refused."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bridge.unmappable(FRAMEWORK, "a user message's content", content)
    return bridge.parts_text(FRAMEWORK, "a user message's content part", content, _TEXT, _MEDIA)


def _answer_position(new_items: Sequence[RunItem], first_new: int) -> int:
    """Where the final answer sits in the history: after the input, at its item's index."""
    for index in range(len(new_items) - 1, -1, -1):
        if isinstance(new_items[index], MessageOutputItem):
            return first_new + index
    return first_new + max(len(new_items) - 1, 0)
