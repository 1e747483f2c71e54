"""memhoncho in the OpenAI Agents SDK: a real Agent and Runner with the SDK's ScriptedModel (a
``Model`` of its interface), SQLite sessions, a real worker."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, SQLiteSession, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from framework_scenario import KEY, OWNER, Scenario, model_reply, only_record, outbox_files

from memhoncho.capture.host import Host
from memhoncho.errors import UnmappableMessage
from memhoncho.integrations.openai_agents import HonchoMemory

pytestmark = pytest.mark.standin(api_key=KEY, llm=True)
set_tracing_disabled(True)  # no trace export: there is no API key


def rendered(call: ModelCall) -> str:
    items = call.input if isinstance(call.input, list) else [call.input]
    return "\n".join([call.system_instructions or "", *(json.dumps(i, default=str) for i in items)])


def user_text(call: ModelCall) -> str:
    items = (
        call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    )
    return next(i["content"] for i in reversed(items) if i.get("role") == "user")


class AgentsDriver:
    """Turns of one Agents SDK agent, each conversation's history in its own session."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.model = ScriptedModel()
        self.agent = Agent(name="assistant", instructions="You help Ana.", model=self.model)
        self.sessions: dict[str, SQLiteSession] = {}
        self.last: dict[str, tuple[str, int]] = {}
        self.seen: list[str] = []
        self.calls = itertools.count()
        self.again = False

    def _respond(self, call: ModelCall) -> Any:
        self.seen.append(rendered(call))
        items = call.input if isinstance(call.input, list) else []
        last = items[-1] if items else {}
        tool_result = last.get("output") if last.get("type") == "function_call_output" else None
        action, value = model_reply(user_text(call), tool_result, self.again)
        if action == "call":
            return [function_call("honcho_chat", value, call_id=f"call-{next(self.calls)}")]
        return [assistant_message(value)]

    def _run(self, conversation: str, text: str) -> Any:
        while self.model.remaining_steps < 2:  # a turn calls the model once, or twice with a tool
            self.model.enqueue(ModelStep.respond(self._respond))
        session = self.sessions.setdefault(conversation, SQLiteSession(conversation))
        memory = HonchoMemory(self.host, OWNER)
        return asyncio.run(memory.run(self.agent, text, session=session))

    def turn(self, conversation: str, text: str) -> str:
        session = self.sessions.get(conversation)
        before = len(asyncio.run(session.get_items())) if session else 0
        result = self._run(conversation, text)
        self.last[conversation] = (text, before)
        return str(result.final_output)

    def repeat(self, conversation: str) -> None:
        """Undo the last turn in the session (``pop_item``), run it again: the same run."""
        self._undo(conversation)
        self._run(conversation, self.last[conversation][0])

    def replay(self, conversation: str) -> str:
        """Undo the last turn, run it again with the model answering differently."""
        self._undo(conversation)
        self.again = True
        try:
            return str(self._run(conversation, self.last[conversation][0]).final_output)
        finally:
            self.again = False

    def _undo(self, conversation: str) -> None:
        before = self.last[conversation][1]
        session = self.sessions[conversation]
        while len(asyncio.run(session.get_items())) > before:
            asyncio.run(session.pop_item())


@pytest.mark.slow
def test_an_agents_sdk_agent_stores_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    scenario(AgentsDriver)


def test_an_input_part_it_cannot_map_is_refused_before_the_model_and_nothing_is_written(
    host: Host, data_dir: Path
) -> None:
    model = ScriptedModel([[assistant_message("never")]])
    agent = Agent(name="a", model=model)
    memory = HonchoMemory(host, OWNER, "conv-x")
    odd = [{"role": "user", "content": [{"type": "input_hologram", "data": "…"}]}]
    with pytest.raises(UnmappableMessage) as refused:
        asyncio.run(memory.run(agent, odd))
    assert refused.value.code == "ERR_FRAMEWORK_MESSAGE"
    assert model.calls == (), "the model was never called"
    assert outbox_files(data_dir) == []


def test_without_a_session_the_trailing_user_items_are_the_new_input(
    host: Host, data_dir: Path
) -> None:
    model = ScriptedModel([[assistant_message("fine")], [assistant_message("fine")]])
    agent = Agent(name="a", model=model)
    memory = HonchoMemory(host, OWNER, "conv-list")
    history = [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "earlier answer"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "now"},
                {"type": "input_image", "image_url": "x"},
            ],
        },
    ]
    asyncio.run(memory.run(agent, history))
    asyncio.run(memory.run(agent, history))  # the same run again: a duplicate
    assert [(m["entry_id"], m["text"]) for m in only_record(data_dir)["messages"]] == [
        (2, "now\n[image not stored: memhoncho keeps text only]"),
        (3, "fine"),
    ]
