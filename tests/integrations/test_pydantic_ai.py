"""memhoncho in pydantic-ai: a real Agent with pydantic-ai's FunctionModel, a real worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC
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
    model_reply,
    only_record,
    outbox_files,
)
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.errors import UnmappableMessage
from memhoncho.integrations.pydantic_ai import HonchoMemory

pytestmark = pytest.mark.standin(api_key=KEY, llm=True)


def rendered(messages: list[ModelMessage]) -> str:
    """What the model was given, as text: each request's instructions and every part."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest) and message.instructions:
            lines.append(message.instructions)
        lines += [str(getattr(part, "content", part)) for part in message.parts]
    return "\n".join(lines)


class PydanticAIDriver:
    """Turns of one pydantic-ai Agent; the history kept per conversation, as an app keeps it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.agent = Agent(FunctionModel(self._model))
        self.history: dict[str, list[ModelMessage]] = {}
        self.last: dict[str, tuple[str, list[ModelMessage], str]] = {}
        self.seen: list[str] = []
        self.again = False

    def _model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(rendered(messages))
        user_text = next(
            part.content
            for message in reversed(messages)
            for part in message.parts
            if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        )
        last = messages[-1]
        tool_result = next(
            (str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)), None
        )
        action, value = model_reply(user_text, tool_result, self.again)
        if action == "call":
            return ModelResponse(parts=[ToolCallPart("honcho_chat", value)])
        return ModelResponse(parts=[TextPart(value)])

    def _run(self, conversation: str, text: str, history: list[ModelMessage], **kw: Any) -> Any:
        memory = HonchoMemory(self.host, OWNER)
        # asyncio.run, not run_sync: run_sync leaves its event loop open for the next call,
        # and its collection later (a ResourceWarning) disturbs whatever runs then
        return asyncio.run(
            self.agent.run(
                text,
                message_history=history,
                conversation_id=conversation,
                capabilities=[memory],
                **kw,
            )
        )

    def turn(self, conversation: str, text: str) -> str:
        history = self.history.get(conversation, [])
        result = self._run(conversation, text, history)
        self.history[conversation] = result.all_messages()
        self.last[conversation] = (text, history, result.all_messages()[-1].run_id)
        return str(result.output)

    def repeat(self, conversation: str) -> None:
        text, history, run_id = self.last[conversation]
        self._run(conversation, text, history, run_id=run_id)  # the same run, retried

    def replay(self, conversation: str) -> str:
        """The same ``run_id`` and history again, the model answering differently."""
        text, history, run_id = self.last[conversation]
        self.again = True
        try:
            result = self._run(conversation, text, history, run_id=run_id)
        finally:
            self.again = False
        self.history[conversation] = result.all_messages()
        return str(result.output)


def last_prompt(messages: list[ModelMessage]) -> str:
    return next(
        part.content
        for message in reversed(messages)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )


#: what the streamed chat says: prompt, answer, prompt, answer...
STREAMED_SAID = ["book the flight", "Book it?", "yes", "Done.", "cancel the hotel", "Cancel it?"]
STREAMED_SAID += ["yes", "Done."]


def streamed_and_iterated(host: Host) -> Held:
    """The scenario's ``more``: ``run_stream`` read to the end with the history passed on,
    "yes" said twice and answered "Done." both times; a ``run_stream`` the caller stopped
    reading (not answered); ``agent.iter`` driven to its end."""
    answers = dict(zip(STREAMED_SAID[::2], STREAMED_SAID[1::2], strict=True))

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(answers.get(last_prompt(messages), "Iterated."))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        words = answers.get(last_prompt(messages), "A long goodbye, streamed.")
        for i in range(0, len(words), 3):
            yield words[i : i + 3]

    agent = Agent(FunctionModel(answer, stream_function=stream))

    async def chat() -> None:
        history: list[ModelMessage] = []
        for text in STREAMED_SAID[::2]:
            memory = HonchoMemory(host, OWNER, "conv-streamed")
            async with agent.run_stream(
                text, message_history=history, capabilities=[memory]
            ) as result:
                async for _ in result.stream_text(delta=True):
                    pass
            history = result.all_messages()
        left = HonchoMemory(host, OWNER, "conv-left")
        async with agent.run_stream("bye", capabilities=[left]) as result:
            async for _ in result.stream_text(delta=True):
                break  # the user closed the tab
        iterated = HonchoMemory(host, OWNER, "conv-iter")
        async with agent.iter("step by step", capabilities=[iterated]) as run:
            async for _ in run:
                pass

    asyncio.run(chat())
    user = ids.peer_id(OWNER)
    return {
        "conv-streamed": [
            (user if i % 2 == 0 else "agent", text, False) for i, text in enumerate(STREAMED_SAID)
        ],
        "conv-left": [(user, "bye", True)],
        "conv-iter": [(user, "step by step", False), ("agent", "Iterated.", False)],
    }


@pytest.mark.slow
def test_a_pydantic_ai_agent_stores_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    """The scenario (``agent.run``), then ``run_stream`` with "yes" said twice, a stream left
    early and ``agent.iter``: each turn once, in order, through the same worker; audit clean."""
    scenario(PydanticAIDriver, streamed_and_iterated)


def test_a_prompt_part_it_cannot_map_is_refused_before_the_model_and_nothing_is_written(
    host: Host, data_dir: Path
) -> None:
    model = TestModel()
    agent = Agent(model)
    memory = HonchoMemory(host, OWNER, "conv-x")
    odd = object.__new__(ModelResponse)  # not user content of any kind pydantic-ai knows
    with pytest.raises(UnmappableMessage) as refused:
        asyncio.run(agent.run(["hello", odd], capabilities=[memory]))  # type: ignore[list-item]
    assert refused.value.code == "ERR_FRAMEWORK_MESSAGE"
    assert model.last_model_request_parameters is None, "the model was never called"
    assert outbox_files(data_dir) == []


def test_an_image_is_noted_by_kind_and_its_text_kept(host: Host, data_dir: Path) -> None:
    agent = Agent(TestModel(custom_output_text="seen"))
    memory = HonchoMemory(host, OWNER, "conv-img")
    image = ImageUrl("https://example.invalid/knee.png")
    asyncio.run(agent.run(["my knee", image], capabilities=[memory]))
    (outbox,) = outbox_files(data_dir)
    assert '"my knee\\n[image not stored: memhoncho keeps text only]"' in outbox.read_text()
    assert "example.invalid" not in outbox.read_text()


def test_a_run_carries_the_time_its_first_request_was_made_to_honcho(
    host: Host, data_dir: Path
) -> None:
    agent = Agent(TestModel(custom_output_text="noted"))
    memory = HonchoMemory(host, OWNER, "conv-when")
    result = asyncio.run(agent.run("what time is it", capabilities=[memory]))
    began = result.all_messages()[0].timestamp
    assert only_record(data_dir)["happened_at"] == began.astimezone(UTC).isoformat()


def test_a_cancelled_run_is_captured_as_not_answered_and_the_cancellation_goes_on(
    host: Host, data_dir: Path
) -> None:
    started = asyncio.Event()

    async def stuck(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.set()
        await asyncio.Event().wait()  # a provider that never answers
        raise AssertionError("unreachable")

    agent = Agent(FunctionModel(stuck))
    memory = HonchoMemory(host, OWNER, "conv-cancel")

    async def cancel_it() -> None:
        task = asyncio.create_task(agent.run("are you there?", capabilities=[memory]))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_it())
    (outbox,) = outbox_files(data_dir)
    text = outbox.read_text()
    assert '"text":"are you there?"' in text and '"unanswered":true' in text
    assert '"role":"agent"' not in text


def test_a_failed_run_and_the_next_run_give_their_inputs_distinct_entry_ids(
    host: Host, data_dir: Path
) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        action, value = model_reply(rendered(messages), None)
        return ModelResponse(parts=[TextPart(value)])

    agent = Agent(FunctionModel(answer))
    memory = HonchoMemory(host, OWNER, "conv-failed")
    first = asyncio.run(agent.run("hello", capabilities=[memory]))
    history = first.all_messages()
    with pytest.raises(ModelFailure):
        asyncio.run(agent.run(f"boom{FAIL_CUE}", message_history=history, capabilities=[memory]))
    asyncio.run(agent.run("again", message_history=history, capabilities=[memory]))
    (outbox,) = outbox_files(data_dir)
    records = [json.loads(line.split(" ", 1)[1]) for line in outbox.read_text().splitlines()]
    got = [(m["entry_id"], m["text"][:5]) for r in records for m in r["messages"]]
    # history index i is entry 2i+1; the failed input, never in the history, is 2i
    assert got == [(1, "hello"), (3, "answe"), (4, "boom "), (5, "again"), (7, "answe")]
    assert len({entry for entry, _ in got}) == len(got)


def test_a_replay_answered_differently_returns_its_result_and_is_a_new_turn(
    host: Host, data_dir: Path
) -> None:
    answers = iter(["first answer", "another answer"])

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(next(answers))])

    agent = Agent(FunctionModel(answer))
    memory = HonchoMemory(host, OWNER, "conv-replay")
    first = asyncio.run(agent.run("hello", capabilities=[memory]))
    run_id = first.all_messages()[-1].run_id
    again = asyncio.run(agent.run("hello", run_id=run_id, capabilities=[memory]))
    assert again.output == "another answer"
    (outbox,) = outbox_files(data_dir)
    records = [json.loads(line.split(" ", 1)[1]) for line in outbox.read_text().splitlines()]
    assert [[m["text"] for m in r["messages"]] for r in records] == [
        ["hello", "first answer"],
        ["hello", "another answer"],
    ]


def test_run_stream_read_to_the_end_is_answered_and_one_left_early_is_not(
    host: Host, data_dir: Path
) -> None:
    agent = Agent(TestModel(call_tools=[], custom_output_text="a long answer, streamed " * 10))

    async def read(text: str, conversation: str, *, to_the_end: bool) -> None:
        memory = HonchoMemory(host, OWNER, conversation)
        async with agent.run_stream(text, capabilities=[memory]) as result:
            async for _ in result.stream_text(delta=True):
                if not to_the_end:
                    break  # the user closed the tab

    asyncio.run(read("hello", "conv-streamed", to_the_end=True))
    asyncio.run(read("bye", "conv-left", to_the_end=False))
    by_conversation = {
        outbox.stem: [json.loads(line.split(" ", 1)[1]) for line in outbox.read_text().splitlines()]
        for outbox in outbox_files(data_dir)
    }
    streamed = [
        (m["text"], m["meta"].get("unanswered"))
        for m in by_conversation["conv-2dstreamed"][0]["messages"]
    ]
    assert streamed == [("hello", None), ("a long answer, streamed " * 10, None)]
    (left,) = by_conversation["conv-2dleft"]
    assert [(m["text"], m["meta"].get("unanswered")) for m in left["messages"]] == [("bye", True)]
    assert len(by_conversation["conv-2dstreamed"]) == 1
