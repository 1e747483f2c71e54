"""``memhoncho bench integrations``: what memhoncho adds to a turn of each agent framework.

Per framework (pydantic-ai, the OpenAI Agents SDK, LangGraph, each with its own test model and
its own history: message list, SQLite session, checkpointer), in one run: the framework's turn
alone, the same turn with memhoncho's integration, and the time the turn spent inside memhoncho
(``Host.capture``: durable, fsynced, a delivery hint on the embedded broker; ``Host.sections``:
a snapshot of a few hundred characters rendered). Beside them, the streamed turn
(``streamed_turns``) alone and with memhoncho, and how long the first chunk took to reach the
reader in each (``first_chunk``: what a user waits for). p50/p99 in milliseconds. A framework
whose extra is not installed is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from memhoncho import ids
from memhoncho.bench.figures import latency_figures
from memhoncho.bench.streamed_turns import STREAMED, FirstChunks, one_node_graph
from memhoncho.capture.host import Host
from memhoncho.models import Snapshot
from memhoncho.testing.config import write_api_key, write_settings

DEFAULT_SAMPLES = 100  # turns per framework and mode
TURNS_PER_CONVERSATION = 10  # the history grows within a conversation, as in use
OWNER = "bench@example.com"
WORKSPACE = "memhoncho-bench"
REPRESENTATION = "Ana trains for an April marathon; her knee hurts after long runs. " * 6
UNREACHABLE = "http://127.0.0.1:9"  # no worker delivers: the bench measures the host's side

Turn = Callable[[str, str], object]  # (conversation, user text) -> the framework's result


class TimedHost:
    """A ``Host`` that times what the integrations call on the turn's path."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.capture_ms: list[float] = []
        self.sections_ms: list[float] = []

    def capture(self, event: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.host.capture(event)
        finally:
            self.capture_ms.append((time.perf_counter() - start) * 1000)

    def sections(self, conversation_id: str) -> Any:
        start = time.perf_counter()
        try:
            return self.host.sections(conversation_id)
        finally:
            self.sections_ms.append((time.perf_counter() - start) * 1000)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.host, name)


# ------------------------------------------------------------------------- the frameworks


def pydantic_ai_turn(host: Host | None) -> Turn:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from memhoncho.integrations.pydantic_ai import HonchoMemory

    agent = Agent(TestModel(call_tools=[], custom_output_text="Noted."))
    capabilities = [HonchoMemory(host, OWNER)] if host is not None else []
    history: dict[str, list[Any]] = {}

    def turn(conversation: str, text: str) -> object:
        result = agent.run_sync(
            text,
            message_history=history.get(conversation),
            conversation_id=conversation,
            capabilities=capabilities,
        )
        history[conversation] = result.all_messages()
        return result

    return turn


def openai_agents_turn(host: Host | None) -> Turn:
    from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from memhoncho.integrations.openai_agents import HonchoMemory

    set_tracing_disabled(True)
    model = ScriptedModel()
    agent = Agent(name="bench", instructions="You help.", model=model)
    sessions: dict[str, SQLiteSession] = {}
    memories: dict[str, HonchoMemory] = {}

    def turn(conversation: str, text: str) -> object:
        if model.remaining_steps < 1:
            model.extend([ModelStep(output=[assistant_message("Noted.")])] * 50)
        session = sessions.setdefault(conversation, SQLiteSession(conversation))
        if host is None:
            return asyncio.run(Runner.run(agent, text, session=session))
        memory = memories.setdefault(conversation, HonchoMemory(host, OWNER, conversation))
        return asyncio.run(memory.run(agent, text, session=session))

    return turn


def langgraph_turn(host: Host | None) -> Turn:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableConfig

    from memhoncho.integrations.langgraph import HonchoMemory

    memory = HonchoMemory(host, OWNER) if host is not None else None
    chat = FakeMessagesListChatModel(responses=[AIMessage("Noted.")])
    model = memory.model(chat) if memory is not None else chat

    graph = one_node_graph(model)

    def turn(conversation: str, text: str) -> object:
        config: RunnableConfig = {"configurable": {"thread_id": conversation}}
        payload: Any = {"messages": [("user", text)]}
        if memory is None:
            return graph.invoke(payload, config)
        return memory.invoke(graph, payload, config)

    return turn


FRAMEWORKS: dict[str, tuple[str, Callable[[Host | None], Turn]]] = {
    "pydantic-ai": ("pydantic_ai", pydantic_ai_turn),
    "openai-agents": ("agents", openai_agents_turn),
    "langgraph": ("langgraph", langgraph_turn),
}


# ---------------------------------------------------------------------------- measuring


def _turns(turn: Turn, prefix: str, samples: int) -> list[float]:
    turn(f"{prefix}-warm", "warm up")  # imports, first clients, first files
    times = []
    for i in range(samples):
        conversation = f"{prefix}-{i // TURNS_PER_CONVERSATION}"
        start = time.perf_counter()
        turn(conversation, f"turn {i}: my knee hurts after long runs")
        times.append((time.perf_counter() - start) * 1000)
    return times


def _snapshots(host: Host, prefix: str, samples: int) -> None:
    """A snapshot for every conversation, so the sections render text, as after a refresh."""
    store = host.deployment.store()
    settings = host.deployment.settings()
    for n in range(samples // TURNS_PER_CONVERSATION + 1):
        conversation = f"{prefix}-{n}"
        snapshot = Snapshot(
            conversation_id=conversation,
            workspace_id=WORKSPACE,
            user_peer_id=ids.peer_id(OWNER),
            agent_peer_id=settings.agent_peer_id,
            representation=REPRESENTATION,
            summary="Ana asked about her knee.",
            context_tokens=settings.context_tokens,
            fetched_at=time.time(),
        )
        store.write_snapshot(ids.conversation_key(conversation), snapshot)


def _framework(name: str, make: Callable[[Host | None], Turn], root: Path, samples: int) -> Any:
    config_dir, data_dir = root / name / "config", root / name / "data"
    write_settings(config_dir, base_url=UNREACHABLE, workspace_id=WORKSPACE)
    write_api_key(config_dir, "bench-key")
    alone = _turns(make(None), f"{name}-alone", samples)
    first_alone, first_memory = FirstChunks(), FirstChunks()
    streamed_alone = _turns(STREAMED[name](None, first_alone), f"{name}-s-alone", samples)
    with Host(config_dir, data_dir, init=True) as host:
        _snapshots(host, f"{name}-memory", samples)
        _snapshots(host, f"{name}-s-memory", samples)
        timed = TimedHost(host)
        with_memory = _turns(make(cast(Host, timed)), f"{name}-memory", samples)
        streamed = _turns(STREAMED[name](host, first_memory), f"{name}-s-memory", samples)
    inside = [c + s for c, s in zip(timed.capture_ms[1:], timed.sections_ms[1:], strict=False)]
    return {
        "framework_turn": latency_figures(alone),
        "turn_with_memhoncho": latency_figures(with_memory),
        #: p50 with memhoncho minus p50 alone: capture and sections, and also the framework
        #: handling three more tools, the instructions callable and reading the history's length
        "added_p50_ms": round(statistics.median(with_memory) - statistics.median(alone), 3),
        "in_memhoncho": latency_figures(inside),
        "capture": latency_figures(timed.capture_ms[1:]),
        "sections": latency_figures(timed.sections_ms[1:]),
        "sections_calls_per_turn": round(len(timed.sections_ms) / (samples + 1), 2),
        "streamed_turn": latency_figures(streamed_alone),
        "streamed_turn_with_memhoncho": latency_figures(streamed),
        "streamed_added_p50_ms": round(
            statistics.median(streamed) - statistics.median(streamed_alone), 3
        ),
        "first_chunk": latency_figures(first_alone.ms[1:]),
        "first_chunk_with_memhoncho": latency_figures(first_memory.ms[1:]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import importlib.util

    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    results: dict[str, Any] = {
        "samples": samples,
        "turns_per_conversation": TURNS_PER_CONVERSATION,
        "frameworks": {},
    }
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-integrations-") as tmp:
        for name, (module, make) in FRAMEWORKS.items():
            if importlib.util.find_spec(module) is None:
                results["frameworks"][name] = {"skipped": f"pip install 'memhoncho[{name}]'"}
                continue
            results["frameworks"][name] = _framework(name, make, Path(tmp), samples)
    return results
