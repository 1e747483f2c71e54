"""Representation refresh against the stand-in (real SDK over HTTP) and sections from the cache."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids, memory
from memhoncho.deployment import Deployment
from memhoncho.errors import InvalidInput
from memhoncho.honcho import adapter
from memhoncho.memory import SectionsStatus
from memhoncho.models import Ledger
from memhoncho.store.ledger import write_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key

CONVERSATION = "conv/1"
OWNER = "ana@example.com"
AGENT = "agent"


def _configure(config_dir: Path, **settings: Any) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(settings))
    write_api_key(config_dir, "test-key")


@pytest.fixture
def settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> dict[str, Any]:
    values: dict[str, Any] = {"base_url": standin.url, "workspace_id": workspace_id}
    _configure(config_dir, **values)
    return values


def _delivered_conversation(deployment: Deployment, *, delivered_at: float | None = None) -> str:
    """A conversation whose session exists in the stand-in, with a ledger saying so."""
    settings = deployment.settings()
    session = ids.session_id(settings.workspace_id, CONVERSATION)
    user = ids.peer_id(OWNER)
    client = adapter.write_client(deployment.honcho_target())
    adapter.ensure_session(client, session, user, AGENT)
    adapter.add_messages(client, session, [adapter.OutgoingMessage(user, "I run marathons")])
    write_ledger(
        deployment.layout,
        ids.conversation_key(CONVERSATION),
        Ledger(
            conversation_id=CONVERSATION,
            owner=OWNER,
            session_id=session,
            delivered_seq=1,
            last_delivered_at=delivered_at or time.time(),
        ),
    )
    return session


def _set_card(standin: HonchoStandIn, workspace: str, card: list[str]) -> None:
    url = f"{standin.url}/v3/workspaces/{workspace}/peers/{AGENT}/card?target={ids.peer_id(OWNER)}"
    request = urllib.request.Request(
        url,
        data=json.dumps({"peer_card": card}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=5).close()  # noqa: S310 (loopback stand-in)


def test_a_refresh_caches_representation_summary_and_card_and_sections_render_them(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    session = _delivered_conversation(deployment)
    client = adapter.write_client(deployment.honcho_target())
    adapter.create_conclusion(client, AGENT, ids.peer_id(OWNER), "Ana trains for a marathon")
    standin.set_summary(workspace_id, session, "Ana talked about her knee.")
    _set_card(standin, workspace_id, ["Name: Ana", "Runner"])
    snapshot = memory.refresh_representation(deployment, CONVERSATION)
    assert snapshot.representation == "Ana trains for a marathon"
    assert snapshot.summary == "Ana talked about her knee."
    assert snapshot.peer_card == ["Name: Ana", "Runner"]
    cached = json.loads(deployment.layout.cache(ids.conversation_key(CONVERSATION)).read_text())
    assert cached["fetched_at"] == snapshot.fetched_at
    result = memory.sections(deployment, CONVERSATION)
    assert result.status is SectionsStatus.FRESH and not result.stale
    assert result.text("long-term-memory") == "Ana trains for a marathon"
    assert "her knee" in result.text("honcho-memory")
    assert "- Runner" in result.text("honcho-memory")
    assert "<long-term-memory>" in result.render()


def test_sections_make_no_network_call(
    deployment: Deployment, standin: HonchoStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    _delivered_conversation(deployment)
    memory.refresh_representation(deployment, CONVERSATION)
    before = standin.request_count()
    monkeypatch.setattr(adapter, "read_client", lambda *a, **k: pytest.fail("network"))
    memory.sections(deployment, CONVERSATION)
    assert standin.request_count() == before


def test_a_refresh_of_a_conversation_not_yet_in_honcho_takes_the_representation_only(
    deployment: Deployment, standin: HonchoStandIn
) -> None:
    from memhoncho.store.outbox import Outbox

    Outbox(deployment.layout).append(
        ids.conversation_key("fresh"),
        {"batch_id": "b1", "conversation_id": "fresh", "user_peer_id": "u1", "messages": []},
        max_pending=10,
        delivered_seq=lambda: 0,
        delivered_before=lambda b: False,
    )
    snapshot = memory.refresh_representation(deployment, "fresh")
    assert (snapshot.user_peer_id, snapshot.session_id, snapshot.summary) == ("u1", None, None)


def test_a_refresh_of_an_unknown_conversation_is_refused(deployment: Deployment) -> None:
    with pytest.raises(InvalidInput):
        memory.refresh_representation(deployment, "never-seen")


def test_sections_without_a_cache_are_empty_and_say_why(deployment: Deployment) -> None:
    result = memory.sections(deployment, CONVERSATION)
    assert result.status is SectionsStatus.MISSING
    assert result.render() == "" and result.reason


def test_sections_survive_a_corrupt_cache_file(deployment: Deployment) -> None:
    path = deployment.layout.cache(ids.conversation_key(CONVERSATION))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"representation": "half')
    result = memory.sections(deployment, CONVERSATION)
    assert result.status is SectionsStatus.CORRUPT
    assert [s.text for s in result.sections] == ["", ""]


@pytest.mark.parametrize("bad", ["", " padded ", "a\x00b", 42])
def test_sections_for_an_invalid_id_never_raise(deployment: Deployment, bad: Any) -> None:
    assert memory.sections(deployment, bad).status is SectionsStatus.INVALID


def _write_snapshot(deployment: Deployment, **fields: Any) -> None:
    snapshot = memory.Snapshot(
        conversation_id=CONVERSATION,
        workspace_id="w",
        user_peer_id="u",
        agent_peer_id=AGENT,
        context_tokens=1200,
        fetched_at=fields.pop("fetched_at", time.time()),
        **fields,
    )
    path = deployment.layout.cache(ids.conversation_key(CONVERSATION))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(snapshot.model_dump_json())


def test_an_old_snapshot_is_rendered_and_said_to_be_stale(deployment: Deployment) -> None:
    _write_snapshot(deployment, representation="likes tea", fetched_at=time.time() - 3600)
    result = memory.sections(deployment, CONVERSATION)
    assert result.stale and result.status is SectionsStatus.STALE
    assert result.text("long-term-memory") == "likes tea"
    assert 'stale="true"' in result.render()


@pytest.mark.parametrize("tokens", [50, 200, 1200])
def test_sections_stay_within_the_token_budget(
    deployment: Deployment, config_dir: Path, standin: HonchoStandIn, tokens: int
) -> None:
    _configure(config_dir, base_url=standin.url, context_tokens=tokens)
    words = " ".join(f"fact{n}" for n in range(3000))
    _write_snapshot(deployment, representation=words, summary=words, peer_card=["a"] * 500)
    result = memory.sections(deployment, CONVERSATION)
    assert result.tokens <= tokens
    assert memory.estimate_tokens(result.render()) <= tokens
    assert all(s.truncated for s in result.sections)
    assert all(s.text.endswith("[…]") or not s.text for s in result.sections)


def test_a_short_section_leaves_its_budget_to_the_other(
    deployment: Deployment, config_dir: Path, standin: HonchoStandIn
) -> None:
    _configure(config_dir, base_url=standin.url, context_tokens=400)
    _write_snapshot(deployment, representation="x " * 2000, summary="short")
    result = memory.sections(deployment, CONVERSATION)
    assert result.sections[0].tokens > 300
    assert not result.sections[1].truncated


def test_refresh_is_due_for_delivered_conversations_with_old_or_missing_snapshots(
    deployment: Deployment,
) -> None:
    now = time.time()
    for name, delivered_at in (("new", now - 5), ("old", now - 10 * 86_400), ("never", None)):
        write_ledger(
            deployment.layout,
            ids.conversation_key(name),
            Ledger(conversation_id=name, last_delivered_at=delivered_at),
        )
    assert memory.refresh_due(deployment, now=now) == ["new", "old"]  # no snapshot yet
    for name in ("new", "old"):
        path = deployment.layout.cache(ids.conversation_key(name))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            memory.Snapshot(
                conversation_id=name,
                workspace_id="w",
                user_peer_id="u",
                agent_peer_id=AGENT,
                context_tokens=1200,
                fetched_at=now - 60,
            ).model_dump_json()
        )
    assert memory.refresh_due(deployment, now=now) == []  # younger than the TTL (600 s)
    later = now + 3600
    assert memory.refresh_due(deployment, now=later) == ["new"]  # "old" is not recent nor behind
    deployment.layout.cache(ids.conversation_key("old")).write_text("{")
    assert memory.refresh_due(deployment, now=later) == ["new", "old"]  # corrupt: due at once
