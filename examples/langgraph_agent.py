"""A LangGraph agent with memhoncho's memory, end to end on this machine, no API key.

    pip install 'memhoncho[langgraph]' && python examples/langgraph_agent.py

langchain-core's FakeMessagesListChatModel stands in for an LLM; the Honcho stand-in, a worker
and beat run as ``memhoncho demo`` runs them. The graph's checkpointer keeps the thread;
memhoncho captures each invocation, offers its recall tools in a ToolNode, adds the sections.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, TypedDict

from _harness import OWNER, running, show_delivered
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from memhoncho.integrations.langgraph import HonchoMemory

CONVERSATION = "langgraph-example"
ASK_MEMORY = {"name": "honcho_chat", "args": {"query": "What is Ana training for?"}, "id": "t1"}
#: (what the user says, what the scripted model replies: a tool call first, or None to fail)
TURNS: list[tuple[str, list[AIMessage] | None]] = [
    ("I'm Ana. I'm training for a marathon in April.", [AIMessage("Noted: a marathon in April.")]),
    (
        "What do you remember about me?",
        [AIMessage("", tool_calls=[ASK_MEMORY]), AIMessage("Memory says you train for April.")],
    ),
    ("Please fail now.", None),
    ("My knee hurts after long runs.", [AIMessage("Noted: the knee.")]),
]


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def main() -> int:
    with running("langgraph") as (demo, host):
        host.call_tool(
            "honcho_remember", {"content": "Ana trains for an April marathon."}, owner=OWNER
        )
        model: list[Any] = [None]  # this turn's scripted model (None: it fails)

        # --- what an app writes: the model with sections, recall tools, a captured invoke ---
        memory = HonchoMemory(host, OWNER)

        def agent(state: State, config: RunnableConfig) -> dict[str, Any]:
            if model[0] is None:
                raise RuntimeError("the model provider is down")
            return {"messages": [memory.model(model[0]).invoke(state["messages"], config)]}

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode(memory.tools()))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": CONVERSATION}}
        for text, scripted in TURNS:
            model[0] = FakeMessagesListChatModel(responses=scripted) if scripted else None
            try:
                out = memory.invoke(graph, {"messages": [("user", text)]}, config)
            except RuntimeError as exc:
                demo.say(f"user: {text}\n          graph failed: {exc} (captured as not answered)")
                continue
            tool = next((m for m in out["messages"][-3:] if m.type == "tool"), None)
            told = f" (memory told it: {str(tool.content)[:70]})" if tool else ""
            demo.say(f"user: {text}\n          agent: {out['messages'][-1].content}{told}")
        return show_delivered(demo, CONVERSATION, expected=2 * len(TURNS) - 1)


if __name__ == "__main__":
    sys.exit(main())
