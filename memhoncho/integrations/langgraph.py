"""memhoncho in LangGraph (with langchain-core): ``pip install 'memhoncho[langgraph]'``.

- ``HonchoMemory.model(model)``: the chat model as a ``Runnable`` that puts the sections, read
  from the local snapshot, in a system message before the graph's messages on every call (the
  state is not changed: the sections are never written to the checkpoint).
- ``HonchoMemory.tools()``: the recall tools as langchain-core ``StructuredTool``s bound to the
  owner, for ``model.bind_tools`` and a ``ToolNode``.
- ``HonchoMemory.invoke(graph, input, config)`` (and ``ainvoke``): ``graph.invoke`` captured as
  one memhoncho run: the human messages of ``input`` and the graph's final AI message; a graph
  that raised is captured as not answered and the error re-raised.

The conversation is the checkpointer's ``thread_id`` unless one is given. With a checkpointer the
new messages' entry ids follow the thread's history; without one, ``input`` is the whole history
and its trailing human messages are the new input.

    memory = HonchoMemory(host, owner="ana@example.com")
    out = memory.invoke(graph, {"messages": [("user", text)]}, {"configurable": {"thread_id": t}})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import convert_to_messages
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import StructuredTool

from memhoncho.integrations import bridge

FRAMEWORK = "langgraph"
#: content blocks of a human message that are not text, by the kind their note names
_MEDIA = {
    "image_url": "image",
    "image": "image",
    "file": "file",
    "audio": "audio",
    "input_audio": "audio",
    "video": "video",
}


class HonchoMemory(bridge.FrameworkMemory):
    """memhoncho's memory for one owner in a LangGraph graph. ``conversation_id`` None: the
    ``thread_id`` of the run's config."""

    framework = FRAMEWORK

    # ---- what the graph gets ------------------------------------------------------------

    def tools(self) -> list[StructuredTool]:
        """The recall tools as langchain-core tools, bound to the owner."""
        return [
            StructuredTool.from_function(
                func=_caller(self._tools, spec.name),
                name=spec.name,
                description=spec.description,
                args_schema=spec.parameters,
            )
            for spec in bridge.recall_tools(self.host)
        ]

    def model(self, model: Runnable[Any, Any]) -> Runnable[Any, Any]:
        """``model`` with the sections in a system message ahead of the messages it is given."""

        def with_sections(messages: Sequence[Any], config: RunnableConfig) -> Any:
            text = bridge.prompt_text(self.host, self._conversation(config, required=False))
            prompt: list[Any] = list(messages)
            if text:
                prompt.insert(0, SystemMessage(text))
            return model.invoke(prompt, config)

        return RunnableLambda(with_sections, name="honcho_memory_model")

    # ---- the run ------------------------------------------------------------------------

    def invoke(
        self, graph: Any, input: dict[str, Any], config: RunnableConfig, **kwargs: Any
    ) -> Any:
        """``graph.invoke(input, config, **kwargs)``, captured as one memhoncho run."""
        history = None
        if _checkpointed(graph, config):
            history = len(graph.get_state(config).values.get("messages", []))
        conversation, inputs = self._begin(input, config, history)
        try:
            output = graph.invoke(input, config, **kwargs)
        except BaseException:  # an error or a cancellation: still one run, not answered
            bridge.capture_failed(self.host, lambda: self._turn(conversation, inputs, None))
            raise
        self._finish(conversation, inputs, output)
        return output

    async def ainvoke(
        self, graph: Any, input: dict[str, Any], config: RunnableConfig, **kwargs: Any
    ) -> Any:
        """``graph.ainvoke(input, config, **kwargs)``, captured as one memhoncho run."""
        history = None
        if _checkpointed(graph, config):
            history = len((await graph.aget_state(config)).values.get("messages", []))
        conversation, inputs = self._begin(input, config, history)
        try:
            output = await graph.ainvoke(input, config, **kwargs)
        except BaseException:
            bridge.capture_failed(self.host, lambda: self._turn(conversation, inputs, None))
            raise
        self._finish(conversation, inputs, output)
        return output

    def _begin(
        self, input: dict[str, Any], config: RunnableConfig, history: int | None
    ) -> tuple[str, tuple[bridge.Entry, ...]]:
        """The conversation and the run's new inputs, mapped before the graph runs (a message
        it cannot map is refused here: no model call, nothing written). ``history``: the
        thread's messages so far, None without a checkpointer."""
        conversation = self._conversation(config, required=True)
        assert conversation is not None
        raw = input.get("messages") if isinstance(input, dict) else None
        if not isinstance(raw, list | tuple):
            raise bridge.unmappable(FRAMEWORK, "a graph input without a messages list", input)
        try:
            messages = convert_to_messages(raw)
        except (ValueError, TypeError, NotImplementedError):
            raise bridge.unmappable(FRAMEWORK, "a graph input message", raw) from None
        before = history or 0
        start = 0
        if history is None:  # the input is the whole history: its trailing human messages are new
            start = len(messages)
            while start > 0 and isinstance(messages[start - 1], HumanMessage):
                start -= 1
        inputs = tuple(
            bridge.Entry(before + i, _human_text(m))
            for i, m in enumerate(messages)
            if i >= start and isinstance(m, HumanMessage)
        )
        return conversation, inputs

    def _finish(self, conversation: str, inputs: tuple[bridge.Entry, ...], output: Any) -> None:
        messages = output.get("messages", []) if isinstance(output, dict) else []
        answer = _final_answer(messages)
        bridge.capture(self.host, self._turn(conversation, inputs, answer))

    def _conversation(self, config: RunnableConfig | None, *, required: bool) -> str | None:
        conversation = self.conversation_id or _thread(config)
        if conversation is None and required:
            raise bridge.unmappable(
                FRAMEWORK, "a run with no conversation_id and no thread_id", config
            )
        return conversation


def _caller(tools: bridge.OwnerTools, name: str) -> Callable[..., dict[str, Any]]:
    def call(**arguments: Any) -> dict[str, Any]:
        return tools.call(name, arguments)

    call.__name__ = name
    return call


def _checkpointed(graph: Any, config: RunnableConfig | None) -> bool:
    """The graph keeps the thread: its history is in the checkpointer, not in the input."""
    return bool(getattr(graph, "checkpointer", None)) and _thread(config) is not None


def _thread(config: RunnableConfig | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else None


def _human_text(message: BaseMessage) -> str:
    """A human message's text: text blocks kept, media noted, anything else refused."""
    content = message.content
    if isinstance(content, str):
        return content
    where = "a human message's content block"
    return bridge.parts_text(FRAMEWORK, where, content, ("text",), _MEDIA, bare_strings=True)


def _final_answer(messages: Sequence[Any]) -> bridge.Entry | None:
    """The graph's answer: its last message, when that is an AI message with text (the text
    of its text blocks; tool calls and reasoning are steps, not the answer). None otherwise."""
    if not messages or not isinstance(messages[-1], AIMessage):
        return None
    message = messages[-1]
    if message.tool_calls:
        return None
    return bridge.Entry(len(messages) - 1, message.text)
