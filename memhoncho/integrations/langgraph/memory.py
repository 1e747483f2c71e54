"""memhoncho's memory for LangGraph graphs.

- ``HonchoMemory.model(model)``: the chat model as a ``Runnable`` that puts the sections, read
  from the local snapshot, in a system message before the graph's messages on every call (the
  state is not changed: the sections are never written to the checkpoint); its ``bind_tools``
  binds the model's tools and keeps the sections, so a prebuilt agent takes it.
- ``HonchoMemory.prompt()``: the sections for a prebuilt agent's ``prompt=`` hook instead.
- ``HonchoMemory.tools()``: the recall tools as langchain-core ``StructuredTool``s, for
  ``model.bind_tools`` and a ``ToolNode``; each call takes its owner from the run's config
  (``configurable["owner"]``, else the memory's owner), so one compiled graph serves many users.
- ``HonchoMemory.invoke(graph, input, config)`` (and ``ainvoke``, ``stream``, ``astream`` in any
  ``stream_mode``): the graph's run captured as one memhoncho run: the human messages of
  ``input`` and the graph's final AI message; a graph that raised, was cancelled, or whose
  stream the caller stopped reading is captured as not answered and the error goes on.

The conversation is the checkpointer's ``thread_id`` unless one is given; the owner is the
config's ``configurable["owner"]`` unless it has none. With a checkpointer the
new messages' entry ids follow the thread's history; without one, ``input`` is the whole history
and its trailing human messages are the new input.

    memory = HonchoMemory(host, owner="ana@example.com")
    out = memory.invoke(graph, {"messages": [("user", text)]}, {"configurable": {"thread_id": t}})
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import convert_to_messages
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import StructuredTool

from memhoncho.integrations import bridge
from memhoncho.integrations.langgraph.streaming import Modes

OWNER_KEY = "owner"  #: the ``configurable`` key a run names its owner by

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
    """memhoncho's memory in a LangGraph graph. ``owner``: the owner of runs whose config
    names none (``configurable["owner"]``); ``conversation_id`` None: the ``thread_id`` of the
    run's config."""

    framework = FRAMEWORK

    # ---- what the graph gets ------------------------------------------------------------

    def tools(self) -> list[StructuredTool]:
        """The recall tools as langchain-core tools; each call's owner is its run's."""
        return [
            StructuredTool.from_function(
                func=_caller(self, spec.name),
                name=spec.name,
                description=spec.description,
                args_schema=spec.parameters,
            )
            for spec in bridge.recall_tools(self.host)
        ]

    def model(self, model: Runnable[Any, Any]) -> Runnable[Any, Any]:
        """``model`` with the sections in a system message ahead of the messages it is given."""
        return SectionsModel(self, model)

    def prompt(self) -> Runnable[Any, list[BaseMessage]]:
        """A prebuilt agent's ``prompt=``: the sections as a system message, then the state's
        messages (``create_react_agent(chat, tools, prompt=memory.prompt())``)."""

        def with_sections(state: Any, config: RunnableConfig) -> list[BaseMessage]:
            raw = state.get("messages", []) if isinstance(state, dict) else state.messages
            return self.with_sections(convert_to_messages(raw), config)

        return RunnableLambda(with_sections, name="honcho_memory_prompt")

    def with_sections(self, messages: Sequence[Any], config: RunnableConfig) -> list[Any]:
        """``messages`` with the sections of the run's conversation ahead of them."""
        text = bridge.prompt_text(self.host, self._conversation(config, required=False))
        return [SystemMessage(text), *messages] if text else list(messages)

    def owner_of(self, config: RunnableConfig | None) -> str | None:
        """The run's owner: its config's ``configurable["owner"]``, else the memory's."""
        owner = ((config or {}).get("configurable") or {}).get(OWNER_KEY)
        return str(owner) if owner is not None else self.owner

    def call_tool(self, name: str, arguments: Any, config: RunnableConfig | None) -> Any:
        """A recall tool called in a run, for that run's owner."""
        return bridge.OwnerTools(self.host, self.owner_of(config), self._tools.via).call(
            name, arguments
        )

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
            self._failed(conversation, inputs, config)
            raise
        self._finish(conversation, inputs, output, config)
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
            self._failed(conversation, inputs, config)
            raise
        self._finish(conversation, inputs, output, config)
        return output

    def stream(
        self, graph: Any, input: dict[str, Any], config: RunnableConfig, **kwargs: Any
    ) -> Iterator[Any]:
        """``graph.stream(input, config, **kwargs)`` in any ``stream_mode``, each chunk handed
        on as it comes, captured as one run when the stream ends (not answered when it raised
        or the caller stopped reading)."""
        history = None
        if _checkpointed(graph, config):
            history = len(graph.get_state(config).values.get("messages", []))
        conversation, inputs = self._begin(input, config, history)
        modes = Modes.of(kwargs)
        default = getattr(graph, "stream_mode", "values")
        chunks = graph.stream(input, config, stream_mode=modes.streamed(default), **kwargs)
        completed = False
        try:
            for chunk in chunks:
                asked, handed = modes.hand_back(chunk, default)
                if asked:
                    yield handed
            completed = True
        finally:
            chunks.close()
            self._settle(conversation, inputs, modes.final if completed else None, config)

    async def astream(
        self, graph: Any, input: dict[str, Any], config: RunnableConfig, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """``graph.astream``, as ``stream`` (a cancellation goes on, the run not answered)."""
        history = None
        if _checkpointed(graph, config):
            history = len((await graph.aget_state(config)).values.get("messages", []))
        conversation, inputs = self._begin(input, config, history)
        modes = Modes.of(kwargs)
        default = getattr(graph, "stream_mode", "values")
        chunks = graph.astream(input, config, stream_mode=modes.streamed(default), **kwargs)
        completed = False
        try:
            async for chunk in chunks:
                asked, handed = modes.hand_back(chunk, default)
                if asked:
                    yield handed
            completed = True
        finally:
            await chunks.aclose()
            self._settle(conversation, inputs, modes.final if completed else None, config)

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

    def _settle(
        self,
        conversation: str,
        inputs: tuple[bridge.Entry, ...],
        final: Any,
        config: RunnableConfig,
    ) -> None:
        """A stream ended: its final state captured, or (None) the run as not answered."""
        if final is None:
            self._failed(conversation, inputs, config)
        else:
            self._finish(conversation, inputs, final, config)

    def _failed(
        self, conversation: str, inputs: tuple[bridge.Entry, ...], config: RunnableConfig
    ) -> None:
        bridge.capture_failed(self.host, lambda: self._run(conversation, inputs, None, config))

    def _finish(
        self,
        conversation: str,
        inputs: tuple[bridge.Entry, ...],
        output: Any,
        config: RunnableConfig,
    ) -> None:
        messages = output.get("messages", []) if isinstance(output, dict) else []
        answer = _final_answer(messages)
        bridge.capture(self.host, self._run(conversation, inputs, answer, config))

    def _run(
        self,
        conversation: str,
        inputs: tuple[bridge.Entry, ...],
        answer: bridge.Entry | None,
        config: RunnableConfig,
    ) -> bridge.Turn:
        """The run, named by its position, for the run's owner."""
        identity = bridge.position_identity(inputs)
        owner = self.owner_of(config)
        return bridge.Turn(FRAMEWORK, conversation, owner, identity, inputs, answer)

    def _conversation(self, config: RunnableConfig | None, *, required: bool) -> str | None:
        conversation = self.conversation_id or _thread(config)
        if conversation is None and required:
            raise bridge.unmappable(
                FRAMEWORK, "a run with no conversation_id and no thread_id", config
            )
        return conversation


class SectionsModel(RunnableLambda[Any, Any]):
    """A chat model with the sections ahead of its messages. ``bind_tools`` binds the tools to
    the model inside and keeps the sections: a prebuilt agent (``create_react_agent``) binds
    its tools through it."""

    def __init__(self, memory: HonchoMemory, model: Runnable[Any, Any]) -> None:
        def with_sections(messages: Sequence[Any], config: RunnableConfig) -> Any:
            return model.invoke(memory.with_sections(messages, config), config)

        async def awith_sections(messages: Sequence[Any], config: RunnableConfig) -> Any:
            return await model.ainvoke(memory.with_sections(messages, config), config)

        super().__init__(with_sections, awith_sections, name="honcho_memory_model")
        self.memory = memory
        self.inner = model

    def bind_tools(self, tools: Any, **kwargs: Any) -> SectionsModel:
        """The inner model's ``bind_tools``, the sections kept."""
        return SectionsModel(self.memory, self.inner.bind_tools(tools, **kwargs))  # type: ignore[attr-defined]


def _caller(memory: HonchoMemory, name: str) -> Callable[..., Any]:
    def call(config: RunnableConfig, **arguments: Any) -> Any:
        return memory.call_tool(name, arguments, config)

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
