"""memhoncho in LangGraph: a real StateGraph with a checkpointer, langchain-core's
FakeMessagesListChatModel, a ToolNode of the recall tools, a real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from framework_scenario import (
    KEY,
    OWNER,
    ModelFailure,
    Scenario,
    model_reply,
    only_record,
    outbox_files,
)
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from memhoncho.capture.host import Host
from memhoncho.errors import UnmappableMessage
from memhoncho.integrations.langgraph import HonchoMemory

pytestmark = pytest.mark.standin(api_key=KEY, llm=True)


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


class Seen(BaseCallbackHandler):
    """Records what each chat model call was given."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.seen.append("\n".join(str(m.content) for m in messages[0]))


def failing(messages: Any) -> Any:
    raise ModelFailure("the model failed")


class LangGraphDriver:
    """Turns of one compiled graph; each conversation is a checkpointer thread."""

    def __init__(self, host: Host) -> None:
        self.memory = HonchoMemory(host, OWNER)
        self.model: Any = None  # this turn's scripted fake model
        self.seen: list[str] = []
        self.last: dict[str, tuple[str, RunnableConfig]] = {}
        self.again = False

        def agent(state: State, config: RunnableConfig) -> dict[str, Any]:
            return {"messages": [self.memory.model(self.model).invoke(state["messages"], config)]}

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode(self.memory.tools()))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        self.graph = builder.compile(checkpointer=InMemorySaver())

    def _script(self, text: str) -> None:
        """The fake model's replies for this turn: a tool call first if the turn asks for one."""
        try:
            action, value = model_reply(text, None, self.again)
        except ModelFailure:
            self.model = RunnableLambda(failing)
            return
        replies = []
        if action == "call":
            replies.append(
                AIMessage("", tool_calls=[{"name": "honcho_chat", "args": value, "id": "t1"}])
            )
            value = model_reply(text, "told", self.again)[1]
        replies.append(AIMessage(value))
        self.model = FakeMessagesListChatModel(responses=replies)

    def _invoke(self, text: str, config: RunnableConfig) -> dict[str, Any]:
        self._script(text)
        config = {**config, "callbacks": [Seen(self.seen)]}
        return self.memory.invoke(self.graph, {"messages": [HumanMessage(text)]}, config)

    def turn(self, conversation: str, text: str) -> str:
        config: RunnableConfig = {"configurable": {"thread_id": conversation}}
        before = self.graph.get_state(config).config
        out = self._invoke(text, config)
        self.last[conversation] = (text, before)
        return str(out["messages"][-1].content)

    def repeat(self, conversation: str) -> None:
        """Replay the last turn from the checkpoint before it (LangGraph's time travel)."""
        text, before = self.last[conversation]
        self._invoke(text, before)

    def replay(self, conversation: str) -> str:
        """Time travel again, the model answering differently."""
        text, before = self.last[conversation]
        self.again = True
        try:
            return str(self._invoke(text, before)["messages"][-1].content)
        finally:
            self.again = False


@pytest.mark.slow
def test_a_langgraph_graph_stores_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    scenario(LangGraphDriver)


def test_a_content_block_it_cannot_map_is_refused_before_the_graph_and_nothing_is_written(
    host: Host, data_dir: Path
) -> None:
    driver = LangGraphDriver(host)
    odd = HumanMessage(content=[{"type": "hologram", "data": "…"}])
    config: RunnableConfig = {"configurable": {"thread_id": "conv-x"}}
    with pytest.raises(UnmappableMessage) as refused:
        driver.memory.invoke(driver.graph, {"messages": [odd]}, config)
    assert refused.value.code == "ERR_FRAMEWORK_MESSAGE"
    assert driver.graph.get_state(config).values == {}, "the graph never ran"
    assert outbox_files(data_dir) == []


def test_without_a_checkpointer_the_trailing_human_messages_are_the_new_input(
    host: Host, data_dir: Path
) -> None:
    memory = HonchoMemory(host, OWNER, "conv-list")
    builder = StateGraph(State)
    model = FakeMessagesListChatModel(responses=[AIMessage("fine")])
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    graph = builder.compile()
    history = [
        ("user", "earlier"),
        ("assistant", "earlier answer"),
        HumanMessage([{"type": "text", "text": "now"}, {"type": "image_url", "image_url": "x"}]),
    ]
    memory.invoke(graph, {"messages": history}, {})
    # the same run again, through ainvoke: a duplicate
    asyncio.run(memory.ainvoke(graph, {"messages": history}, {}))
    assert [(m["entry_id"], m["text"]) for m in only_record(data_dir)["messages"]] == [
        (2, "now\n[image not stored: memhoncho keeps text only]"),
        (3, "fine"),
    ]
