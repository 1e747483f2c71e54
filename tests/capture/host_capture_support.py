"""What the Host.capture tests share: a run event, and the data directory's bytes and records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.store.layout import Layout
from memhoncho.store.outbox import Outbox

SECRET = "sk-secret-0123456789abcdef"
CONTENT = "my-private-diary-entry-xyzzy"
BROKER_DOWN_BUDGET_MS = 50  # the bound for a capture with the broker down


def run_event(run_id: str = "r-1", conversation: str = "c-42", **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "conversation_id": conversation,
        "owner": "ana@example.com",
        "run_id": run_id,
        "inputs": [{"entry_id": 17, "text": "hello"}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 18, "content": [{"type": "text", "text": "hi there"}]},
        },
        "selection": None,
    }
    event.update(changes)
    return event


def snapshot(data_dir: Path) -> dict[str, bytes]:
    """Every durable byte under data/ (locks and the broker's folders aside)."""
    root = data_dir / "data"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def records(data_dir: Path, conversation: str = "c-42") -> list[dict[str, Any]]:
    return Outbox(Layout(data_dir)).read(ids.conversation_key(conversation)).records
