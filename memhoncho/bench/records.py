"""The record the file and PostgreSQL benches load: a captured run of two messages.

``bench sweep`` writes it to outbox files, ``bench pg`` COPYs it into a scratch database; one
shape for both, so their figures measure the same records.
"""

from __future__ import annotations

from typing import Any


def bench_record(conversation: str, seq: int, now: float, text: str) -> dict[str, Any]:
    """A captured run of two messages, without its seq (the outbox or the database gives it)."""
    batch = f"b{conversation}{seq:07d}"
    return {
        "batch_id": batch,
        "conversation_id": conversation,
        "owner": "bench-user",
        "user_peer_id": "bench-user",
        "run_id": f"r{seq}",
        "captured_at": now,
        "messages": [
            {"id": f"{batch}-0", "role": "user", "entry_id": seq * 2, "text": text, "meta": {}},
            {
                "id": f"{batch}-1",
                "role": "agent",
                "entry_id": seq * 2 + 1,
                "text": text,
                "meta": {},
            },
        ],
    }
