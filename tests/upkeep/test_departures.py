"""host.user_deleted: a departure notice always; with purge, exactly that user's local data goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.errors import InvalidId
from memhoncho.models import Ledger
from memhoncho.status.view import status_view
from memhoncho.store.atomic import write_json
from memhoncho.store.ledger import write_ledger
from memhoncho.testing.runs import answered_run

ANA = "ana@example.com"
BO = "bo@example.com"


def _run(conversation: str, run: str, owner: str | None) -> dict[str, Any]:
    return answered_run(conversation, run, owner)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and "locks" not in p.parts
        and "departures" not in p.parts
        and "broker" not in p.parts
        and p.name != "status-summary.json"
    }


def _seed(host: Host) -> None:
    layout = host.deployment.layout
    for conversation, owner in (("ana-1", ANA), ("ana-2", ANA), ("bo-1", BO), ("free", None)):
        host.capture(_run(conversation, "r1", owner))
        host.capture(_run(conversation, "r2", owner))
        write_json(layout.cache(ids.conversation_key(conversation)), {"representation": "x"})
    # a conversation of Ana's that has delivered everything: only its ledger says whose it is
    key = ids.conversation_key("ana-old")
    write_ledger(layout, key, Ledger(conversation_id="ana-old", owner=ANA, session_id="s"))
    write_json(layout.cache(key), {"representation": "y"})


def test_a_departure_without_purge_writes_a_notice_and_removes_nothing(host: Host) -> None:
    _seed(host)
    root = host.deployment.data_dir
    before = _files(root)
    result = host.user_deleted(ANA)
    assert result["purged"] is False and result["records_removed"] == 0
    assert _files(root) == before
    notice = json.loads(
        (host.deployment.layout.departures_dir / f"{ids.peer_id(ANA)}.json").read_text()
    )
    assert notice["peer_id"] == ids.peer_id(ANA) and notice["purged"] is False


def test_purge_removes_exactly_that_users_pending_records_and_caches(host: Host) -> None:
    _seed(host)
    layout = host.deployment.layout
    root = host.deployment.data_dir
    before = _files(root)
    result = host.user_deleted(ANA, purge=True)
    ana_keys = sorted(ids.conversation_key(c) for c in ("ana-1", "ana-2", "ana-old"))
    assert result["conversations"] == ana_keys
    assert result["records_removed"] == 4
    assert result["messages_removed"] == 8
    assert result["caches_removed"] == 3
    after = _files(root)
    removed = {k for k in before if k not in after or after[k] != before[k]}
    expected = {f"cache/representations/{k}.json" for k in ana_keys} | {
        f"data/outbox/{ids.conversation_key(c)}.jsonl" for c in ("ana-1", "ana-2")
    }
    assert removed == expected
    for conversation in ("ana-1", "ana-2"):
        assert host.deployment.store().records(ids.conversation_key(conversation)) == []
    for conversation in ("bo-1", "free"):
        assert len(host.deployment.store().records(ids.conversation_key(conversation))) == 2
    assert layout.ledger(ids.conversation_key("ana-old")).exists()  # what Honcho holds stays known
    text = json.dumps(result)
    assert "hello" not in text and ANA not in text


def test_purged_records_are_gone_from_the_status_view_and_the_departure_shows(host: Host) -> None:
    _seed(host)
    assert status_view(host.deployment)["outbox"]["pending_batches"] == 8
    host.user_deleted(BO, purge=True)
    view = status_view(host.deployment)
    assert view["outbox"]["pending_batches"] == 6
    assert view["departures"]["count"] == 1
    assert view["departures"]["notices"][0]["peer_id"] == ids.peer_id(BO)
    assert view["departures"]["notices"][0]["purged"] is True


def test_new_captures_after_a_purge_are_kept(host: Host) -> None:
    _seed(host)
    host.user_deleted(ANA, purge=True)
    assert host.capture(_run("ana-1", "r3", ANA)).status == "captured"
    assert len(host.deployment.store().records(ids.conversation_key("ana-1"))) == 1


def test_a_malformed_user_name_is_refused_and_changes_nothing(host: Host) -> None:
    _seed(host)
    before = _files(host.deployment.data_dir)
    with pytest.raises(InvalidId):
        host.user_deleted("", purge=True)
    assert _files(host.deployment.data_dir) == before
    assert not host.deployment.layout.departures_dir.exists()


def test_purge_on_the_database_store_removes_that_users_snapshots_there(
    config_dir: Path, data_dir: Path, postgres_url: str
) -> None:
    from memhoncho.models import Snapshot
    from memhoncho.testing.config import write_settings

    write_settings(config_dir, store_url=postgres_url)
    with Host(config_dir, data_dir) as host:
        store = host.deployment.store()
        for conversation, owner in (("ana-1", ANA), ("bo-1", BO)):
            key = ids.conversation_key(conversation)
            store.write_ledger(key, Ledger(conversation_id=conversation, owner=owner))
            store.write_snapshot(
                key,
                Snapshot(
                    conversation_id=conversation,
                    workspace_id="w",
                    user_peer_id=ids.peer_id(owner),
                    agent_peer_id="agent",
                    context_tokens=100,
                    fetched_at=1.0,
                ),
            )
        result = host.user_deleted(ANA, purge=True)
        assert result["caches_removed"] == 1
        assert result["conversations"] == [ids.conversation_key("ana-1")]
        assert store.read_snapshot(ids.conversation_key("ana-1")) is None
        assert store.read_snapshot(ids.conversation_key("bo-1")) is not None
