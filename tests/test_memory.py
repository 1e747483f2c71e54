"""Representation refresh against the stand-in (real SDK over HTTP) and sections from the cache."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memhoncho import honcho, ids, memory
from memhoncho.context import Context
from memhoncho.errors import InvalidInput
from memhoncho.memory import SectionsStatus
from memhoncho.models import Ledger
from memhoncho.store.ledger import write_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key

CONVERSATION = "conv/1"
OWNER = "ana@example.com"
AGENT = "agent"


@pytest.fixture
def standin() -> Iterator[HonchoStandIn]:
    with HonchoStandIn() as server:
        yield server
    honcho.close_clients()


def _configure(config_dir: Path, **settings: Any) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(settings))
    write_api_key(config_dir, "test-key")


@pytest.fixture
def context(config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str) -> Context:
    _configure(config_dir, base_url=standin.url, workspace_id=workspace_id)
    return Context(config_dir, data_dir)


def _delivered_conversation(context: Context, *, delivered_at: float | None = None) -> str:
    """A conversation whose session exists in the stand-in, with a ledger saying so."""
    settings = context.settings()
    session = ids.session_id(settings.workspace_id, CONVERSATION)
    user = ids.peer_id(OWNER)
    client = honcho.write_client(context.honcho_target())
    honcho.ensure_session(client, session, user, AGENT)
    honcho.add_messages(client, session, [honcho.OutgoingMessage(user, "I run marathons")])
    write_ledger(
        context.layout,
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
    context: Context, standin: HonchoStandIn, workspace_id: str
) -> None:
    session = _delivered_conversation(context)
    client = honcho.write_client(context.honcho_target())
    honcho.create_conclusion(client, AGENT, ids.peer_id(OWNER), "Ana trains for a marathon")
    standin.set_summary(workspace_id, session, "Ana talked about her knee.")
    _set_card(standin, workspace_id, ["Name: Ana", "Runner"])
    snapshot = memory.refresh_representation(context, CONVERSATION)
    assert snapshot.representation == "Ana trains for a marathon"
    assert snapshot.summary == "Ana talked about her knee."
    assert snapshot.peer_card == ["Name: Ana", "Runner"]
    cached = json.loads(context.layout.cache(ids.conversation_key(CONVERSATION)).read_text())
    assert cached["fetched_at"] == snapshot.fetched_at
    result = memory.sections(context, CONVERSATION)
    assert result.status is SectionsStatus.FRESH and not result.stale
    assert result.text("long-term-memory") == "Ana trains for a marathon"
    assert "her knee" in result.text("honcho-memory")
    assert "- Runner" in result.text("honcho-memory")
    assert "<long-term-memory>" in result.render()


def test_sections_make_no_network_call(
    context: Context, standin: HonchoStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    _delivered_conversation(context)
    memory.refresh_representation(context, CONVERSATION)
    before = standin.request_count()
    monkeypatch.setattr(honcho, "read_client", lambda *a, **k: pytest.fail("network"))
    memory.sections(context, CONVERSATION)
    assert standin.request_count() == before


def test_a_refresh_of_a_conversation_not_yet_in_honcho_takes_the_representation_only(
    context: Context, standin: HonchoStandIn
) -> None:
    from memhoncho.store.outbox import Outbox

    Outbox(context.layout).append(
        ids.conversation_key("fresh"),
        {"batch_id": "b1", "conversation_id": "fresh", "user_peer_id": "u1", "messages": []},
        max_pending=10,
        delivered_seq=lambda: 0,
        delivered_before=lambda b: False,
    )
    snapshot = memory.refresh_representation(context, "fresh")
    assert (snapshot.user_peer_id, snapshot.session_id, snapshot.summary) == ("u1", None, None)


def test_a_refresh_of_an_unknown_conversation_is_refused(context: Context) -> None:
    with pytest.raises(InvalidInput):
        memory.refresh_representation(context, "never-seen")


def test_sections_without_a_cache_are_empty_and_say_why(context: Context) -> None:
    result = memory.sections(context, CONVERSATION)
    assert result.status is SectionsStatus.MISSING
    assert result.render() == "" and result.reason


def test_sections_survive_a_corrupt_cache_file(context: Context) -> None:
    path = context.layout.cache(ids.conversation_key(CONVERSATION))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"representation": "half')
    result = memory.sections(context, CONVERSATION)
    assert result.status is SectionsStatus.CORRUPT
    assert [s.text for s in result.sections] == ["", ""]


@pytest.mark.parametrize("bad", ["", " padded ", "a\x00b", 42])
def test_sections_for_an_invalid_id_never_raise(context: Context, bad: Any) -> None:
    assert memory.sections(context, bad).status is SectionsStatus.INVALID


def _write_snapshot(context: Context, **fields: Any) -> None:
    snapshot = memory.Snapshot(
        conversation_id=CONVERSATION,
        workspace_id="w",
        user_peer_id="u",
        agent_peer_id=AGENT,
        context_tokens=1200,
        fetched_at=fields.pop("fetched_at", time.time()),
        **fields,
    )
    path = context.layout.cache(ids.conversation_key(CONVERSATION))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(snapshot.model_dump_json())


def test_an_old_snapshot_is_rendered_and_said_to_be_stale(context: Context) -> None:
    _write_snapshot(context, representation="likes tea", fetched_at=time.time() - 3600)
    result = memory.sections(context, CONVERSATION)
    assert result.stale and result.status is SectionsStatus.STALE
    assert result.text("long-term-memory") == "likes tea"
    assert 'stale="true"' in result.render()


@pytest.mark.parametrize("tokens", [50, 200, 1200])
def test_sections_stay_within_the_token_budget(
    context: Context, config_dir: Path, standin: HonchoStandIn, tokens: int
) -> None:
    _configure(config_dir, base_url=standin.url, context_tokens=tokens)
    words = " ".join(f"fact{n}" for n in range(3000))
    _write_snapshot(context, representation=words, summary=words, peer_card=["a"] * 500)
    result = memory.sections(context, CONVERSATION)
    assert result.tokens <= tokens
    assert memory.estimate_tokens(result.render()) <= tokens
    assert all(s.truncated for s in result.sections)
    assert all(s.text.endswith("[…]") or not s.text for s in result.sections)


def test_a_short_section_leaves_its_budget_to_the_other(
    context: Context, config_dir: Path, standin: HonchoStandIn
) -> None:
    _configure(config_dir, base_url=standin.url, context_tokens=400)
    _write_snapshot(context, representation="x " * 2000, summary="short")
    result = memory.sections(context, CONVERSATION)
    assert result.sections[0].tokens > 300
    assert not result.sections[1].truncated


def test_refresh_is_due_for_delivered_conversations_with_old_or_missing_snapshots(
    context: Context,
) -> None:
    now = time.time()
    for name, delivered_at in (("new", now - 5), ("old", now - 10 * 86_400), ("never", None)):
        write_ledger(
            context.layout,
            ids.conversation_key(name),
            Ledger(conversation_id=name, last_delivered_at=delivered_at),
        )
    assert memory.refresh_due(context, now=now) == ["new", "old"]  # no snapshot yet
    for name in ("new", "old"):
        path = context.layout.cache(ids.conversation_key(name))
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
    assert memory.refresh_due(context, now=now) == []  # younger than the TTL (600 s)
    later = now + 3600
    assert memory.refresh_due(context, now=later) == ["new"]  # "old" is not recent nor behind
    context.layout.cache(ids.conversation_key("old")).write_text("{")
    assert memory.refresh_due(context, now=later) == ["new", "old"]  # corrupt: due at once
