"""A pydantic-ai agent with memhoncho's memory, end to end on this machine, no API key.

    pip install 'memhoncho[pydantic-ai]' && python examples/pydantic_ai_agent.py

pydantic-ai's FunctionModel stands in for an LLM; the Honcho stand-in, a worker and beat run
as ``memhoncho demo`` runs them. Each turn is captured as one memhoncho run; the model calls
memhoncho's recall tool; a failed run is stored as not answered; the sections reach the prompt.
"""

from __future__ import annotations

import sys

from _harness import OWNER, running, show_delivered
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memhoncho.integrations.pydantic_ai import HonchoMemory

CONVERSATION = "pydantic-ai-example"
TURNS = [
    "I'm Ana. I'm training for a marathon in April.",
    "What do you remember about me?",  # the model asks memory (honcho_chat)
    "Please fail now.",  # the model raises: stored as not answered
    "My knee hurts after long runs.",
]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A scripted LLM: asks memory when asked what it remembers, fails when told to."""
    request = messages[-1]
    returned = [p for p in request.parts if isinstance(p, ToolReturnPart)]
    if returned:
        return ModelResponse(parts=[TextPart(f"Memory says: {returned[0].content}")])
    prompt = str(request.parts[-1].content)
    if "fail" in prompt:
        raise RuntimeError("the model provider is down")
    if "remember" in prompt:
        return ModelResponse(
            parts=[ToolCallPart("honcho_chat", {"query": "What is Ana training for?"})]
        )
    return ModelResponse(parts=[TextPart(f"Noted: {prompt}")])


def main() -> int:
    with running("pydantic-ai") as (demo, host):
        host.call_tool(
            "honcho_remember", {"content": "Ana trains for an April marathon."}, owner=OWNER
        )
        # --- what an app writes: the capability, per run, beside pydantic-ai's own history ---
        agent = Agent(FunctionModel(model))
        memory = HonchoMemory(host, OWNER)
        history: list[ModelMessage] = []
        for text in TURNS:
            try:
                result = agent.run_sync(
                    text,
                    message_history=history,
                    conversation_id=CONVERSATION,
                    capabilities=[memory],
                )
            except RuntimeError as exc:
                demo.say(
                    f"user: {text}\n          agent run failed: {exc} (captured as not answered)"
                )
                continue
            history = result.all_messages()
            demo.say(f"user: {text}\n          agent: {result.output[:100]}")
        return show_delivered(demo, CONVERSATION, expected=2 * len(TURNS) - 1)


if __name__ == "__main__":
    sys.exit(main())
