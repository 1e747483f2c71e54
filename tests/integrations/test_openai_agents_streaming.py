"""The Agents SDK on the paths real apps take: ``run_streamed``, OpenAI's server-kept history
(``previous_response_id``), handoffs. The SDK's ScriptedModel, a real worker for the scenario."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, SQLiteSession, handoff, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
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
from test_openai_agents import AgentsDriver

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.integrations.openai_agents import HonchoMemory

pytestmark = pytest.mark.standin(api_key=KEY, llm=True)
set_tracing_disabled(True)


class StreamingAgentsDriver(AgentsDriver):
    """The scenario's turns through ``run_streamed``, every event read as a chat app reads it."""

    def _run(self, conversation: str, text: str) -> Any:
        while self.model.remaining_steps < 2:
            self.model.enqueue(ModelStep.respond(self._respond))
        session = self.sessions.setdefault(conversation, SQLiteSession(conversation))
        memory = HonchoMemory(self.host, OWNER)

        async def read() -> Any:
            stream = await memory.run_streamed(self.agent, text, session=session)
            async for _ in stream.stream_events():
                pass
            return stream.result

        return asyncio.run(read())


async def run(memory: HonchoMemory, agent: Agent[Any], text: str, streamed: bool, **kw: Any) -> Any:
    """``memory.run``, or ``memory.run_streamed`` with every event read as a chat app reads it."""
    if not streamed:
        return await memory.run(agent, text, **kw)
    stream = await memory.run_streamed(agent, text, **kw)
    async for _ in stream.stream_events():
        pass
    return stream


def server_kept_chat(host: Host, conversation: str, *, streamed: bool) -> ScriptedModel:
    """ "yes" said twice, the history kept by OpenAI (``previous_response_id``), the model
    answering "Done." both times; the model, for its calls."""
    model = ScriptedModel(
        [
            ModelStep(output=[assistant_message("Book it?")], response_id="resp-1"),
            ModelStep(output=[assistant_message("Done.")], response_id="resp-2"),
            ModelStep(output=[assistant_message("Cancel it?")], response_id="resp-3"),
            ModelStep(output=[assistant_message("Done.")], response_id="resp-4"),
        ]
    )
    agent = Agent(name="a", model=model)
    memory = HonchoMemory(host, OWNER, conversation)

    async def chat() -> None:
        previous = None
        for text in SERVER_KEPT_SAID[::2]:
            result = await run(memory, agent, text, streamed, previous_response_id=previous)
            previous = result.last_response_id

    asyncio.run(chat())
    return model


#: what the server-kept chat says: prompt, answer, prompt, answer...
SERVER_KEPT_SAID = ["book the flight", "Book it?", "yes", "Done.", "cancel the hotel", "Cancel it?"]
SERVER_KEPT_SAID += ["yes", "Done."]


def handed_off(
    host: Host, conversation: str, how: str, *, streamed: bool
) -> tuple[ScriptedModel, Any, str]:
    """A triage agent hands "plan my week" to a coach, who calls honcho_chat, then answers:
    the model, the run's result and the seeded sections."""
    sections = seed_sections(host, conversation, "Ana is training for an April marathon.")
    model = ScriptedModel(
        [
            [function_call("transfer_to_coach", {}, call_id="h1")],
            [function_call("honcho_chat", {"query": "What does Ana train for?"}, call_id="c1")],
            [assistant_message("Keep the long runs easy.")],
        ]
    )
    coach = Agent(name="coach", instructions="You coach runners.", model=model)
    triage = Agent(
        name="triage",
        instructions="Route the user.",
        model=model,
        handoffs=[coach if how == "agent" else handoff(coach)],
    )
    triage.handoffs.append(triage)  # agents that hand back and forth: one clone each
    memory = HonchoMemory(host, OWNER, conversation)
    result = asyncio.run(run(memory, triage, "plan my week", streamed))
    return model, result, sections


def coach_saw_sections_and_recall(model: ScriptedModel, sections: str) -> None:
    coach_calls = model.calls[1:]
    for call in coach_calls:
        assert call.system_instructions is not None
        assert "You coach runners." in call.system_instructions
        assert sections in call.system_instructions
        assert "honcho_chat" in {tool.name for tool in call.tools}
    tool_output = coach_calls[1].input[-1]
    assert tool_output["type"] == "function_call_output"
    assert "error" not in tool_output["output"], tool_output["output"]


def streamed_server_kept_and_handoff(host: Host) -> Held:
    """The scenario's ``more``: "yes" twice with server-kept history and a handoff, streamed."""
    model = server_kept_chat(host, "conv-server", streamed=True)
    assert [call.previous_response_id for call in model.calls] == [
        None,
        "resp-1",
        "resp-2",
        "resp-3",
    ]
    model, result, sections = handed_off(host, "conv-handoff", "handoff()", streamed=True)
    assert result.last_agent.name == "coach"
    coach_saw_sections_and_recall(model, sections)
    user = ids.peer_id(OWNER)
    said = [
        (user if i % 2 == 0 else "agent", text, False) for i, text in enumerate(SERVER_KEPT_SAID)
    ]
    return {
        "conv-server": said,
        "conv-handoff": [
            (user, "plan my week", False),
            ("agent", "Keep the long runs easy.", False),
        ],
    }


@pytest.mark.slow
def test_streamed_agents_sdk_turns_store_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    """The scenario streamed, then "yes" said twice with server-kept history and a handoff,
    streamed: each turn once, in order, through the same worker; audit clean."""
    scenario(StreamingAgentsDriver, streamed_server_kept_and_handoff)


def texts(data_dir: Path) -> list[list[tuple[str, bool]]]:
    return [
        [(m["text"], bool(m["meta"].get("unanswered"))) for m in r["messages"]]
        for r in records(data_dir)
    ]


def test_a_stream_the_caller_stops_reading_is_captured_once_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    model = ScriptedModel(
        [
            [function_call("honcho_search", {"query": "x"}, call_id="s1")],
            [assistant_message("late")],
        ]
    )
    memory = HonchoMemory(host, OWNER, "conv-abandon")

    async def abandon() -> int:
        stream = await memory.run_streamed(Agent(name="a", model=model), "hello")
        events = stream.stream_events()
        async for _ in events:
            break  # the user closed the tab
        await events.aclose()  # type: ignore[attr-defined]
        return len(model.calls)

    asyncio.run(abandon())
    assert texts(data_dir) == [[("hello", True)]]


def test_a_stream_that_fails_raises_the_models_error_and_is_captured_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    model = ScriptedModel([ModelStep.raise_error(ModelFailure("the model failed"))])
    memory = HonchoMemory(host, OWNER, "conv-stream-fail")

    async def read() -> None:
        stream = await memory.run_streamed(Agent(name="a", model=model), f"hi{FAIL_CUE}")
        async for _ in stream.stream_events():
            pass

    with pytest.raises(ModelFailure):
        asyncio.run(read())
    assert texts(data_dir) == [[(f"hi{FAIL_CUE}", True)]]


def test_a_cancelled_stream_passes_the_cancellation_on_and_is_captured_as_not_answered(
    host: Host, data_dir: Path
) -> None:
    started = asyncio.Event()

    async def stuck(call: Any) -> Any:
        started.set()
        await asyncio.Event().wait()  # a provider that never answers

    model = ScriptedModel([ModelStep.respond(stuck)])
    memory = HonchoMemory(host, OWNER, "conv-stream-cancel")

    async def cancel_it() -> None:
        stream = await memory.run_streamed(Agent(name="a", model=model), "are you there?")

        async def read() -> None:
            async for _ in stream.stream_events():
                pass

        task = asyncio.create_task(read())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    assert texts(data_dir) == [[("are you there?", True)]]


def test_yes_said_twice_with_server_kept_history_is_two_turns(host: Host, data_dir: Path) -> None:
    model = server_kept_chat(host, "conv-server", streamed=False)
    assert [call.previous_response_id for call in model.calls] == [
        None,
        "resp-1",
        "resp-2",
        "resp-3",
    ]
    said = [m[0] for r in texts(data_dir) for m in r]
    assert said == SERVER_KEPT_SAID


@pytest.mark.parametrize("how", ["agent", "handoff()"])
def test_the_agent_handed_to_sees_the_sections_and_calls_a_recall_tool(
    host: Host, data_dir: Path, how: str
) -> None:
    model, result, sections = handed_off(host, "conv-handoff", how, streamed=False)
    assert result.last_agent.name == "coach"
    coach_saw_sections_and_recall(model, sections)
    assert texts(data_dir) == [[("plan my week", False), ("Keep the long runs easy.", False)]]
