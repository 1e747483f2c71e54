"""memhoncho in pydantic-ai: a real Agent with pydantic-ai's FunctionModel, a real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from framework_scenario import KEY, OWNER, Scenario, model_reply, outbox_files
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
        action, value = model_reply(user_text, tool_result)
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


@pytest.mark.slow
def test_a_pydantic_ai_agent_stores_every_turn_once_in_order_through_a_worker(
    scenario: Scenario,
) -> None:
    scenario(PydanticAIDriver)


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
