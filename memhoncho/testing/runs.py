"""Settled runs as a host hands them to ``Host.capture``, and what Honcho should hold after them.

For delivery tests and benchmarks: run ``i`` of a conversation has one user input (entry
``2i``) and one answer (entry ``2i+1``), with texts that name the conversation and the run,
so order and completeness can be read off the stand-in's messages.
"""

from __future__ import annotations

from typing import Any


def user_text(conversation_id: str, i: int) -> str:
    return f"{conversation_id} question {i}"


def answer_text(conversation_id: str, i: int) -> str:
    return f"{conversation_id} answer {i}"


def run_event(
    conversation_id: str, i: int, owner: str | None = "ana@example.com", *, inputs: int = 1
) -> dict[str, Any]:
    """Run ``i``: ``inputs`` user inputs then an answer; entry ids grow with ``i``."""
    base = i * (inputs + 1)
    return {
        "conversation_id": conversation_id,
        "owner": owner,
        "run_id": f"run-{i}",
        "inputs": [
            {
                "entry_id": base + k,
                "text": user_text(conversation_id, i) + (f" part {k}" if k else ""),
            }
            for k in range(inputs)
        ],
        "outcome": {
            "status": "answered",
            "answer": {
                "entry_id": base + inputs,
                "content": [{"type": "text", "text": answer_text(conversation_id, i)}],
            },
        },
    }


def answered_run(
    conversation_id: str, run_id: str, owner: str | None = "ana@example.com"
) -> dict[str, Any]:
    """Run ``run_id``: one user input (entry 1) and an answer (entry 2), texts naming the run."""
    return {
        "conversation_id": conversation_id,
        "owner": owner,
        "run_id": run_id,
        "inputs": [{"entry_id": 1, "text": f"user text of {run_id}"}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 2, "content": [{"type": "text", "text": f"answer {run_id}"}]},
        },
    }


def expected_texts(conversation_id: str, runs: int) -> list[str]:
    """What the conversation's Honcho session holds after ``runs`` single-input runs, in order."""
    texts: list[str] = []
    for i in range(runs):
        texts += [user_text(conversation_id, i), answer_text(conversation_id, i)]
    return texts
