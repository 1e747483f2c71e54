"""memhoncho in the OpenAI Agents SDK: ``pip install 'memhoncho[openai-agents]'``.

``HonchoMemory.run`` is ``Runner.run`` with memory: the agent is cloned (``Agent.clone``) with
dynamic instructions that add the sections, read from the local snapshot on every model call,
and with the recall tools as ``FunctionTool``s bound to the owner; the finished run is captured
as one memhoncho run, and a run that raised is captured as not answered and the error re-raised.
The conversation's history stays the SDK's (a ``Session``, or the input list the caller keeps);
memhoncho reads it to know where the new input sits, and never writes to it.

    memory = HonchoMemory(host, owner="ana@example.com", conversation_id="support-42")
    result = await memory.run(agent, "Where did we leave off?", session=session)
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, Session
from agents.items import MessageOutputItem, RunItem
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
        """A clone of ``agent`` with the sections in its instructions and the recall tools."""
        return agent.clone(
            instructions=self.instructions(agent.instructions, conversation_id),
            tools=[*agent.tools, *self.tools()],
        )

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
        try:
            result = await Runner.run(
                self.agent(agent, conversation), input, session=session, **kwargs
            )
        except BaseException:  # an error or a cancellation: still one run, not answered
            bridge.capture_failed(self.host, lambda: self._turn(conversation, inputs, None))
            raise
        answer = bridge.Entry(
            _answer_position(result.new_items, before + len(items)),
            bridge.answer_text(result.final_output),
        )
        bridge.capture(self.host, self._turn(conversation, inputs, answer))
        return result


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
