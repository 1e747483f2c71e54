"""Helpers shared by the fork tests: runs to capture, the stores and a write client on the
stand-in (fixtures), an in-process delivery, Honcho views."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import forks
from memhoncho.delivery.clone import FORK_CHILD_KEY
from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY, Ledger
from memhoncho.testing import HonchoStandIn

OWNER = "ana@example.com"
PARENT = "chat-parent"
CHILD = "chat-child"


@pytest.fixture
def settings(store_url: str | None) -> dict[str, Any]:
    """The plugin's ``deployment`` runs on both stores (``store_url`` names the database in
    the environment, so a settings file this module writes keeps it)."""
    return {}


@pytest.fixture
def env(
    standin: HonchoStandIn,
    workspace_id: str,
    deployment: Deployment,
    host: Host,  # no API key: capture publishes nothing
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("MEMHONCHO_BASE_URL", standin.url)
    monkeypatch.setenv("MEMHONCHO_WORKSPACE_ID", workspace_id)
    client = adapter.write_client(
        adapter.HonchoTarget(base_url=standin.url, api_key="k", workspace_id=workspace_id)
    )
    yield {"deployment": deployment, "host": host, "client": client, "ws": workspace_id}
    adapter.close_clients()


def run(
    run_id: str, inputs: list[tuple[int, str]], answer: tuple[int, str] | None
) -> dict[str, Any]:
    """A settled run: user inputs (entry id, text), and the answer (entry id, text) or none."""
    outcome: dict[str, Any] = {"status": "unanswered"}
    if answer is not None:
        outcome = {
            "status": "answered",
            "answer": {"entry_id": answer[0], "content": [{"type": "text", "text": answer[1]}]},
        }
    return {
        "run_id": run_id,
        "owner": OWNER,
        "inputs": [{"entry_id": e, "text": t} for e, t in inputs],
        "outcome": outcome,
    }


def deliver_in_process(deployment: Deployment, client: Any, conversation_id: str) -> Ledger:
    """What the delivery engine does, minus its crash handling: enough to drive forks here.

    Resolves the pending fork first, then sends every pending record with its outbox ids and
    entry ids in metadata, and keeps one anchor per delivered message (windowed).
    """
    store = deployment.store()
    settings = deployment.settings()
    key = ids.conversation_key(conversation_id)
    with store.conversation_lock(key):
        ledger = store.read_ledger(key) or Ledger(conversation_id=conversation_id)
        if ledger.session_id is None and store.has_pending_fork(key):
            ledger = forks.resolve_pending_fork(deployment, client, key, conversation_id, ledger)
        pending = store.pending(key, ledger.delivered_seq)
        if ledger.session_id is None:
            if not pending:
                return ledger
            sid = ids.session_id(settings.workspace_id, conversation_id)
            adapter.ensure_session(client, sid, pending[0]["user_peer_id"], settings.agent_peer_id)
            ledger = ledger.model_copy(update={"session_id": sid})
        assert ledger.session_id is not None
        for record in pending:
            outgoing = [
                adapter.OutgoingMessage(
                    peer_id=record["user_peer_id"]
                    if m["role"] == "user"
                    else settings.agent_peer_id,
                    content=m["text"],
                    metadata={**m["meta"], OUTBOX_ID_KEY: m["id"]},
                )
                for m in record["messages"]
            ]
            stored = adapter.add_messages(client, ledger.session_id, outgoing)
            anchors = ledger.anchors + [
                (m["entry_id"], mid) for m, mid in zip(record["messages"], stored, strict=True)
            ]
            ledger = ledger.model_copy(
                update={
                    "delivered_seq": record["seq"],
                    "anchors": anchors[-settings.anchor_window :],
                    "messages_delivered": ledger.messages_delivered + len(stored),
                }
            )
        store.write_ledger(key, ledger)
        return ledger


def texts(standin: HonchoStandIn, workspace: str, session_id: str | None) -> list[str]:
    assert session_id is not None
    return [m["content"] for m in standin.messages(workspace, session_id)]


def sessions_of_child(standin: HonchoStandIn, workspace: str, child_key: str) -> list[str]:
    """Sessions tagged as the child's clone."""
    return [
        s["id"]
        for s in standin.sessions(workspace)
        if s["metadata"].get(FORK_CHILD_KEY) == child_key
    ]
