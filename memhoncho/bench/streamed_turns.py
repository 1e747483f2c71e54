"""The streamed turn of each framework for ``bench integrations``: the same agents as the plain
turns, read as a chat app reads a stream (pydantic-ai ``run_stream``, the Agents SDK
``run_streamed``, LangGraph ``stream`` in ``messages`` mode), alone or through memhoncho. Each
turn notes when its first chunk reached the reader, the latency a user sees."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from memhoncho.capture.host import Host

OWNER = "bench@example.com"

Turn = Callable[[str, str], object]


class FirstChunks:
    """Milliseconds from a turn's start to its first chunk, one per turn."""

    def __init__(self) -> None:
        self.ms: list[float] = []

    def start(self) -> Callable[[], None]:
        began, seen = time.perf_counter(), False

        def chunk() -> None:
            nonlocal seen
            if not seen:
                seen = True
                self.ms.append((time.perf_counter() - began) * 1000)

        return chunk


def pydantic_ai_streamed(host: Host | None, first: FirstChunks) -> Turn:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from memhoncho.integrations.pydantic_ai import HonchoMemory

    agent = Agent(TestModel(call_tools=[], custom_output_text="Noted, and kept in mind."))
    capabilities = [HonchoMemory(host, OWNER)] if host is not None else []
    history: dict[str, list[Any]] = {}

    async def read(conversation: str, text: str) -> object:
        chunk = first.start()
        async with agent.run_stream(
            text,
            message_history=history.get(conversation),
            conversation_id=conversation,
            capabilities=capabilities,
        ) as result:
            async for _ in result.stream_text(delta=True):
                chunk()
        history[conversation] = result.all_messages()
        return result

    return lambda conversation, text: asyncio.run(read(conversation, text))


def openai_agents_streamed(host: Host | None, first: FirstChunks) -> Turn:
    from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from memhoncho.integrations.openai_agents import HonchoMemory

    set_tracing_disabled(True)
    model = ScriptedModel()
    agent = Agent(name="bench", instructions="You help.", model=model)
    sessions: dict[str, SQLiteSession] = {}

    async def read(conversation: str, text: str) -> object:
        if model.remaining_steps < 1:
            model.extend([ModelStep(output=[assistant_message("Noted.")])] * 50)
        session = sessions.setdefault(conversation, SQLiteSession(conversation))
        chunk = first.start()
        if host is None:
            stream: Any = Runner.run_streamed(agent, text, session=session)
        else:
            memory = HonchoMemory(host, OWNER, conversation)
            stream = await memory.run_streamed(agent, text, session=session)
        async for _ in stream.stream_events():
            chunk()
        return stream

    return lambda conversation, text: asyncio.run(read(conversation, text))


def one_node_graph(model: Any) -> Any:
    """The smallest checkpointed chat graph: one node calling ``model``, as the docs' example."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def agent(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], config)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver())


def langgraph_streamed(host: Host | None, first: FirstChunks) -> Turn:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables import RunnableConfig

    from memhoncho.integrations.langgraph import HonchoMemory

    memory = HonchoMemory(host, OWNER) if host is not None else None
    chat = FakeListChatModel(responses=["Noted, and kept in mind."])  # streams by character
    model = memory.model(chat) if memory is not None else chat

    graph = one_node_graph(model)

    def turn(conversation: str, text: str) -> object:
        config: RunnableConfig = {"configurable": {"thread_id": conversation}}
        payload: Any = {"messages": [("user", text)]}
        chunk = first.start()
        if memory is None:
            chunks = graph.stream(payload, config, stream_mode="messages")
        else:
            chunks = memory.stream(graph, payload, config, stream_mode="messages")
        for _ in chunks:
            chunk()
        return None

    return turn


STREAMED: dict[str, Callable[[Host | None, FirstChunks], Turn]] = {
    "pydantic-ai": pydantic_ai_streamed,
    "openai-agents": openai_agents_streamed,
    "langgraph": langgraph_streamed,
}
