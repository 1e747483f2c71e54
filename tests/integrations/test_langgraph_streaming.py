"""LangGraph on the paths real apps take: ``stream`` / ``astream`` in every ``stream_mode``,
the prebuilt agent (``create_react_agent``) on ``memory.model`` or ``memory.prompt()``, one
compiled graph serving two owners. langchain-core's fake chat models, a real worker for the
scenario."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from framework_scenario import (
    FAIL_CUE,
    KEY,
    OWNER,
    Held,
    ModelFailure,
    Scenario,
    records,
    seed_sections,
)
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from test_langgraph import LangGraphDriver, Seen, State, failing

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.integrations.langgraph import HonchoMemory

pytestmark = pytest.mark.standin(api_key=KEY, llm=True)

MODES: list[Any] = [
    "values",
    "updates",
    "messages",
    "custom",
    "debug",
    "checkpoints",
    "tasks",
    ["messages", "updates"],
    ["values", "custom"],
]


class StreamingDriver(LangGraphDriver):
    """The scenario's turns through ``memory.stream`` (``stream_mode="messages"``, as a chat
    app streams tokens), every chunk read."""

    def _invoke(self, text: str, config: RunnableConfig) -> dict[str, Any]:
        self._script(text)
        config = {**config, "callbacks": [Seen(self.seen)]}
        input = {"messages": [HumanMessage(text)]}
        for _ in self.memory.stream(self.graph, input, config, stream_mode="messages"):
            pass
        latest: RunnableConfig = {
            "configurable": {"thread_id": config["configurable"]["thread_id"]}
        }
        return self.graph.get_state(latest).values  # type: ignore[no-any-return]


def other_modes_and_the_prebuilt_agent(host: Host) -> Held:
    """The scenario's ``more``: a turn in every other ``stream_mode`` (the last through
    ``astream``), "yes" said twice among them; the prebuilt agent, one graph, two owners."""
    user = ids.peer_id(OWNER)
    modes = [m for m in MODES if m != "messages"]
    said = [("yes", "Done.") if i in (2, 5) else (f"as {json.dumps(m)}", f"streamed {i}")
            for i, m in enumerate(modes)]  # fmt: skip
    graph = graph_of(FakeMessagesListChatModel(responses=[AIMessage(a) for _, a in said]))
    memory = HonchoMemory(host, OWNER, "conv-modes")
    config: RunnableConfig = {"configurable": {"thread_id": "t-modes"}}
    for mode, (text, _) in zip(modes[:-1], said, strict=False):
        chunks = list(
            memory.stream(graph, {"messages": [("user", text)]}, config, stream_mode=mode)
        )
        assert chunks, mode

    async def last() -> list[Any]:
        input = {"messages": [("user", said[-1][0])]}
        return [c async for c in memory.astream(graph, input, config, stream_mode=modes[-1])]

    assert asyncio.run(last())
    ana_tool, bob_tool, seen, sections = prebuilt_two_owners(host, "model")
    assert ids.peer_id(OWNER) in ana_tool and "marathon" in ana_tool
    assert ids.peer_id(BOB) in bob_tool and "marathon" not in bob_tool and OWNER not in bob_tool
    assert any(sections in s for s in seen), "the sections never reached the model"
    return {
        "conv-modes": [(p, w, False) for q, a in said for p, w in ((user, q), ("agent", a))],
        "t-ana": [(user, f"hello from {OWNER}", False), ("agent", "Hi Ana", False)],
        "t-bob": [(ids.peer_id(BOB), f"hello from {BOB}", False), ("agent", "Hi Bob", False)],
    }


@pytest.mark.slow
def test_streamed_langgraph_turns_store_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    """The scenario streamed (``messages``), then a turn in every other mode with "yes" said
    twice, and the prebuilt agent serving two owners: each turn once, in order, through the
    same worker, no crossing; audit clean."""
    scenario(StreamingDriver, other_modes_and_the_prebuilt_agent)


def said(data_dir: Path) -> list[list[tuple[str, bool]]]:
    return [
        [(m["text"], bool(m["meta"].get("unanswered"))) for m in r["messages"]]
        for r in records(data_dir)
    ]


def graph_of(model: Any, *, checkpointer: bool = True) -> Any:
    """One agent node calling ``model`` (and writing a custom chunk), then the end."""

    def agent(state: State, config: RunnableConfig) -> dict[str, Any]:
        get_stream_writer()({"progress": "thinking"})
        return {"messages": [model.invoke(state["messages"], config)]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver() if checkpointer else None)


def shape(chunk: Any, mode: Any) -> Any:
    """What a chunk is, without what changes from run to run (ids, timestamps)."""
    if isinstance(mode, list):
        return (chunk[0], type(chunk[1]).__name__)
    return type(chunk).__name__


@pytest.mark.parametrize("mode", MODES, ids=json.dumps)
@pytest.mark.parametrize("checkpointer", [True, False], ids=["checkpointer", "no-checkpointer"])
def test_every_stream_mode_hands_the_graphs_own_chunks_and_captures_the_run_once(
    host: Host, data_dir: Path, mode: Any, checkpointer: bool
) -> None:
    plain = graph_of(
        FakeMessagesListChatModel(responses=[AIMessage("ok")]), checkpointer=checkpointer
    )
    plain_config: RunnableConfig = {"configurable": {"thread_id": "t-plain"}}
    own = [
        shape(c, mode)
        for c in plain.stream({"messages": [("user", "hi")]}, plain_config, stream_mode=mode)
    ]
    model = FakeMessagesListChatModel(responses=[AIMessage("fine")])
    graph = graph_of(model, checkpointer=checkpointer)
    memory = HonchoMemory(host, OWNER, "conv-modes")
    config: RunnableConfig = {"configurable": {"thread_id": "t-modes"}}
    got = list(memory.stream(graph, {"messages": [("user", "hello")]}, config, stream_mode=mode))
    assert [shape(c, mode) for c in got] == own
    assert said(data_dir) == [[("hello", False), ("fine", False)]]


def test_subgraph_namespaces_are_kept_in_the_callers_shape(host: Host, data_dir: Path) -> None:
    graph = graph_of(FakeMessagesListChatModel(responses=[AIMessage("fine")]))
    memory = HonchoMemory(host, OWNER, "conv-sub")
    config: RunnableConfig = {"configurable": {"thread_id": "t-sub"}}
    input = {"messages": [("user", "hello")]}
    got = list(memory.stream(graph, input, config, stream_mode="updates", subgraphs=True))
    assert got and all(isinstance(c, tuple) and c[0] == () for c in got)
    assert said(data_dir) == [[("hello", False), ("fine", False)]]


def test_a_stream_the_caller_stops_reading_is_captured_once_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    graph = graph_of(FakeMessagesListChatModel(responses=[AIMessage("never read")]))
    memory = HonchoMemory(host, OWNER, "conv-abandon")
    config: RunnableConfig = {"configurable": {"thread_id": "t-abandon"}}
    chunks = memory.stream(graph, {"messages": [("user", "hello")]}, config, stream_mode="custom")
    assert next(chunks) == {"progress": "thinking"}
    chunks.close()  # the user closed the tab
    assert said(data_dir) == [[("hello", True)]]


def test_a_stream_that_fails_raises_the_models_error_and_is_captured_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    graph = graph_of(RunnableLambda(failing))
    memory = HonchoMemory(host, OWNER, "conv-fail")
    config: RunnableConfig = {"configurable": {"thread_id": "t-fail"}}
    with pytest.raises(ModelFailure):
        for _ in memory.stream(graph, {"messages": [("user", f"hi{FAIL_CUE}")]}, config):
            pass
    assert said(data_dir) == [[(f"hi{FAIL_CUE}", True)]]


def test_a_cancelled_astream_passes_the_cancellation_on_and_is_captured_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    started = asyncio.Event()

    async def stuck(messages: Any) -> Any:
        started.set()
        await asyncio.Event().wait()  # a provider that never answers

    async def agent(state: State, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await RunnableLambda(stuck).ainvoke(state["messages"], config)]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    memory = HonchoMemory(host, OWNER, "conv-cancel")
    config: RunnableConfig = {"configurable": {"thread_id": "t-cancel"}}

    async def cancel_it() -> None:
        async def read() -> None:
            async for _ in memory.astream(graph, {"messages": [("user", "there?")]}, config):
                pass

        task = asyncio.create_task(read())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    assert said(data_dir) == [[("there?", True)]]


class ToolCallingFake(FakeMessagesListChatModel):
    """A fake chat model with ``bind_tools`` as a provider's: the tools bound as kwargs."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def react_agent(model: Any, tools: list[Any], **kwargs: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # deprecated for LangChain's create_agent: still used
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools=tools, checkpointer=InMemorySaver(), **kwargs)


def chat_then_answer(owner: str, answer: str) -> list[AIMessage]:
    call = {"name": "honcho_chat", "args": {"query": "What do you know?"}, "id": f"c-{owner}"}
    return [AIMessage("", tool_calls=[call]), AIMessage(answer)]


BOB = "bob@example.com"


def prebuilt_two_owners(host: Host, hook: str) -> tuple[str, str, list[str], str]:
    """One prebuilt agent graph on ``HonchoMemory(owner=None)``, run for Ana (thread t-ana)
    and Bob (t-bob), each calling honcho_chat: each one's tool answer, what the model saw,
    and the sections seeded for Ana."""
    memory = HonchoMemory(host, owner=None)  # the owner comes with each run
    sections = seed_sections(host, "t-ana", "Ana is training for an April marathon.")
    chat = ToolCallingFake(
        responses=[*chat_then_answer("a", "Hi Ana"), *chat_then_answer("b", "Hi Bob")]
    )
    seen: list[str] = []
    if hook == "model":
        graph = react_agent(memory.model(chat), memory.tools())
    elif hook == "create_agent":  # LangChain's prebuilt agent: binds its tools per request
        agents = pytest.importorskip("langchain.agents")
        graph = agents.create_agent(
            memory.model(chat), tools=memory.tools(), checkpointer=InMemorySaver()
        )
    else:
        graph = react_agent(chat, memory.tools(), prompt=memory.prompt())
    for owner, thread in ((OWNER, "t-ana"), (BOB, "t-bob")):
        config: RunnableConfig = {
            "configurable": {"thread_id": thread, "owner": owner},
            "callbacks": [SeenAll(seen)],
        }
        memory.invoke(graph, {"messages": [("user", f"hello from {owner}")]}, config)
    ana, bob_state = (
        graph.get_state({"configurable": {"thread_id": t}}).values["messages"]
        for t in ("t-ana", "t-bob")
    )
    ana_tool = next(m for m in ana if isinstance(m, ToolMessage)).content
    bob_tool = next(m for m in bob_state if isinstance(m, ToolMessage)).content
    return str(ana_tool), str(bob_tool), seen, sections


@pytest.mark.parametrize("hook", ["model", "prompt", "create_agent"])
def test_the_prebuilt_agent_works_on_memory_and_one_graph_serves_two_owners(
    host: Host, data_dir: Path, hook: str
) -> None:
    host.call_tool("honcho_remember", {"content": "Ana runs marathons."}, owner=OWNER)
    ana_tool, bob_tool, seen, sections = prebuilt_two_owners(host, hook)
    assert ids.peer_id(OWNER) in ana_tool and "marathon" in ana_tool
    assert ids.peer_id(BOB) in bob_tool and "marathon" not in bob_tool and OWNER not in bob_tool
    assert any(sections in s for s in seen), "the sections never reached the model"
    assert said(data_dir) == [
        [(f"hello from {OWNER}", False), ("Hi Ana", False)],
        [(f"hello from {BOB}", False), ("Hi Bob", False)],
    ]
    assert [r["owner"] for r in records(data_dir)] == [OWNER, BOB]


class SeenAll(Seen):
    """Every chat model call's messages, the system message included."""
