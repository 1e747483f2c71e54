"""Representation refresh against the stand-in (real SDK over HTTP) and sections from the
snapshot, on both stores; and a refresh on one machine read by a host on another."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import InvalidInput
from memhoncho.honcho import adapter
from memhoncho.models import Ledger
from memhoncho.recall import memory
from memhoncho.recall.memory import SectionsStatus
from memhoncho.store.postgres import PostgresStore
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


@pytest.fixture
def deployment(
    config_dir: Path, data_dir: Path, settings: dict[str, Any], store_url: str | None
) -> Deployment:
    """The plugin's deployment, on each store (``store_url`` names the database by env)."""
    return Deployment(config_dir, data_dir)


def _write_ledger(deployment: Deployment, conversation_id: str, ledger: Ledger) -> None:
    deployment.store().write_ledger(ids.conversation_key(conversation_id), ledger)


def _corrupt_snapshot(deployment: Deployment, conversation_id: str) -> None:
    """A snapshot that cannot be read: a torn file, or a row that does not validate."""
    key = ids.conversation_key(conversation_id)
    store = deployment.store()
    if isinstance(store, PostgresStore):
        with store.connection() as conn:
            conn.execute(
                "INSERT INTO memhoncho_representations (key, snapshot, fetched_at)"
                " VALUES (%s, %s::jsonb, 0) ON CONFLICT (key)"
                " DO UPDATE SET snapshot = excluded.snapshot",
                (key, '{"representation": "half"}'),
            )
        return
    path = deployment.layout.cache(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"representation": "half')


def _delivered_conversation(deployment: Deployment, *, delivered_at: float | None = None) -> str:
    """A conversation whose session exists in the stand-in, with a ledger saying so."""
    settings = deployment.settings()
    session = ids.session_id(settings.workspace_id, CONVERSATION)
    user = ids.peer_id(OWNER)
    client = adapter.write_client(deployment.honcho_target())
    adapter.ensure_session(client, session, user, AGENT)
    adapter.add_messages(client, session, [adapter.OutgoingMessage(user, "I run marathons")])
    _write_ledger(
        deployment,
        CONVERSATION,
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
    assert memory.read_snapshot(deployment, ids.conversation_key(CONVERSATION)) == snapshot
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
    deployment.store().append(
        ids.conversation_key("fresh"),
        {"batch_id": "b1", "conversation_id": "fresh", "user_peer_id": "u1", "messages": []},
        max_pending=10,
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


def test_sections_survive_a_corrupt_snapshot(deployment: Deployment) -> None:
    _corrupt_snapshot(deployment, CONVERSATION)
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
    deployment.store().write_snapshot(ids.conversation_key(CONVERSATION), snapshot)


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
    deployment: Deployment, store_url: str | None
) -> None:
    now = time.time()
    for name, delivered_at in (("new", now - 5), ("old", now - 10 * 86_400), ("never", None)):
        _write_ledger(
            deployment, name, Ledger(conversation_id=name, last_delivered_at=delivered_at)
        )
    assert memory.refresh_due(deployment, now=now) == ["new", "old"]  # no snapshot yet
    for name in ("new", "old"):
        deployment.store().write_snapshot(
            ids.conversation_key(name),
            memory.Snapshot(
                conversation_id=name,
                workspace_id="w",
                user_peer_id="u",
                agent_peer_id=AGENT,
                context_tokens=1200,
                fetched_at=now - 60,
            ),
        )
    assert memory.refresh_due(deployment, now=now) == []  # younger than the TTL (600 s)
    later = now + 3600
    assert memory.refresh_due(deployment, now=later) == ["new"]  # "old" is not recent nor behind
    if store_url is None:  # a torn file; a database row is written whole, with its time
        deployment.layout.cache(ids.conversation_key("old")).write_text("{")
        assert memory.refresh_due(deployment, now=later) == ["new", "old"]  # due at once


def test_the_file_store_keeps_the_cache_file_it_always_wrote(
    config_dir: Path, data_dir: Path, settings: dict[str, Any], standin: HonchoStandIn
) -> None:
    deployment = Deployment(config_dir, data_dir)  # files: no store_url
    _delivered_conversation(deployment)
    snapshot = memory.refresh_representation(deployment, CONVERSATION)
    path = data_dir / "cache" / "representations" / f"{ids.conversation_key(CONVERSATION)}.json"
    assert path.read_bytes() == snapshot.model_dump_json().encode("utf-8")
    older = snapshot.model_copy(update={"representation": "written by an older memhoncho"})
    path.write_bytes(older.model_dump_json().encode("utf-8"))
    result = memory.sections(deployment, CONVERSATION)
    assert result.text("long-term-memory") == "written by an older memhoncho"


def test_a_refresh_on_one_machine_renders_in_the_sections_of_a_host_on_another(
    tmp_path: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMHONCHO_STORE_URL", postgres_url)
    machines = []
    for name in ("worker-machine", "host-machine"):  # each its own config and data dirs
        _configure(tmp_path / name / "config", base_url=standin.url, workspace_id=workspace_id)
        machines.append(Deployment(tmp_path / name / "config", tmp_path / name / "data"))
    worker, host = machines
    _delivered_conversation(worker)
    client = adapter.write_client(worker.honcho_target())
    adapter.create_conclusion(client, AGENT, ids.peer_id(OWNER), "Ana trains for a marathon")
    assert memory.sections(host, CONVERSATION).status is SectionsStatus.MISSING

    memory.refresh_representation(worker, CONVERSATION)

    result = memory.sections(host, CONVERSATION)
    assert result.status is SectionsStatus.FRESH
    assert result.text("long-term-memory") == "Ana trains for a marathon"
    assert not (tmp_path / "host-machine" / "data" / "cache").exists()
    assert memory.refresh_due(host) == []  # the host's beat sees the worker's refresh too


def test_sections_on_an_unreachable_database_are_empty_with_the_error_status(
    config_dir: Path, data_dir: Path
) -> None:
    from memhoncho.store import close_stores
    from memhoncho.testing.ports import free_port

    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens there
    _configure(config_dir, store_url=url, store_timeout_s=1.0)
    deployment = Deployment(config_dir, data_dir)
    try:
        for _ in range(2):  # the first would build the pool, the second meets no pool
            result = memory.sections(deployment, CONVERSATION)
            assert result.status is SectionsStatus.ERROR
            assert result.render() == "" and [s.text for s in result.sections] == ["", ""]
            assert result.reason and "cannot be reached" in result.reason
            assert "postgres@" not in result.reason
    finally:
        close_stores()
