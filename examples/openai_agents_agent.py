"""An OpenAI Agents SDK agent with memhoncho's memory, end to end on this machine, no API key.

    pip install 'memhoncho[openai-agents]' && python examples/openai_agents_agent.py

The SDK's ScriptedModel (a ``Model`` of its interface) stands in for an LLM; the Honcho
stand-in, a worker and beat run as ``memhoncho demo`` runs them. The SDK's SQLite session keeps
the conversation; memhoncho captures each run, offers its recall tools, adds the sections.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from _harness import OWNER, running, show_delivered
from agents import Agent, SQLiteSession, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from memhoncho.integrations.openai_agents import HonchoMemory

CONVERSATION = "agents-sdk-example"
TURNS = [
    "I'm Ana. I'm training for a marathon in April.",
    "What do you remember about me?",  # the model asks memory (honcho_chat)
    "Please fail now.",  # the model raises: stored as not answered
    "My knee hurts after long runs.",
]


def respond(call: ModelCall) -> Any:
    """A scripted LLM: asks memory when asked what it remembers, fails when told to."""
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":
        return [assistant_message(f"Memory says: {last['output']}")]
    prompt = str(last.get("content"))
    if "fail" in prompt:
        return RuntimeError("the model provider is down")
    if "remember" in prompt:
        return [function_call("honcho_chat", {"query": "What is Ana training for?"}, call_id="c1")]
    return [assistant_message(f"Noted: {prompt}")]


async def conversation(demo: Any, host: Any) -> None:
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(2 * len(TURNS))])
    # --- what an app writes: memory for the owner's conversation, around Runner.run ---
    agent = Agent(name="coach", instructions="You coach Ana.", model=model)
    memory = HonchoMemory(host, OWNER, CONVERSATION)
    session = SQLiteSession(CONVERSATION)  # the SDK keeps the history; memhoncho only reads it
    for text in TURNS:
        try:
            result = await memory.run(agent, text, session=session)
        except RuntimeError as exc:
            demo.say(f"user: {text}\n          agent run failed: {exc} (captured as not answered)")
            continue
        demo.say(f"user: {text}\n          agent: {str(result.final_output)[:100]}")


def main() -> int:
    set_tracing_disabled(True)  # no trace export without an OpenAI key
    with running("openai-agents") as (demo, host):
        host.call_tool(
            "honcho_remember", {"content": "Ana trains for an April marathon."}, owner=OWNER
        )
        asyncio.run(conversation(demo, host))
        return show_delivered(demo, CONVERSATION, expected=2 * len(TURNS) - 1)


if __name__ == "__main__":
    sys.exit(main())
