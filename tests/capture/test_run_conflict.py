"""A run id captured again: the same content is a duplicate, other content a typed refusal; and a
refused capture (too large, malformed, conflicting, ownerless by omission) leaves no file behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memhoncho import Host, ids
from memhoncho.capture.record import batch_id
from memhoncho.errors import CaptureTooLarge, InvalidEvent, RunConflict
from memhoncho.models import Ledger
from memhoncho.store.layout import Layout
from memhoncho.store.ledger import read_ledger, write_ledger
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_settings

CONTENT = "my-private-diary-entry-xyzzy"


def _run(text: str = "hello", run_id: str = "r-1", **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "conversation_id": "c-42",
        "owner": "ana@example.com",
        "run_id": run_id,
        "inputs": [{"entry_id": 17, "text": text}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 18, "content": [{"type": "text", "text": "hi there"}]},
        },
    }
    event.update(changes)
    return event


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and every directory under ``root``, locks included."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")
    }


@pytest.fixture
def host(config_dir: Path, data_dir: Path) -> Iterator[Host]:
    with Host(config_dir=config_dir, data_dir=data_dir) as instance:
        yield instance


def _records(data_dir: Path) -> list[dict[str, Any]]:
    return Outbox(Layout(data_dir)).read(ids.conversation_key("c-42")).records


def test_the_same_run_id_with_other_content_is_refused_as_a_conflict_and_writes_nothing(
    host: Host, data_dir: Path
) -> None:
    host.capture(_run("hello"))
    before = _tree(data_dir)
    with pytest.raises(RunConflict) as caught:
        host.capture(_run("hello, edited " + CONTENT))
    assert caught.value.code == "ERR_RUN_CONFLICT"
    assert "already captured" in str(caught.value)
    assert caught.value.details == {"batch_id": batch_id("c-42", "r-1")}
    assert CONTENT not in json.dumps(caught.value.as_dict())
    assert _tree(data_dir) == before
    assert [m["text"] for m in _records(data_dir)[0]["messages"]] == ["hello", "hi there"]


@pytest.mark.parametrize(
    "other",
    [
        {"owner": "bob@example.com"},
        {"owner": None},
        {"outcome": {"status": "unanswered"}},
        {"inputs": [{"entry_id": 16, "text": "hello"}]},
    ],
)
def test_other_owner_outcome_or_entry_ids_are_other_content(
    host: Host, other: dict[str, Any]
) -> None:
    host.capture(_run())
    with pytest.raises(RunConflict):
        host.capture(_run(**other))


def test_the_same_content_split_differently_is_still_a_duplicate(
    host: Host, config_dir: Path
) -> None:
    host.capture(_run("x" * 250))
    write_settings(config_dir, max_message_length=100)  # splitting is delivery, not content
    assert host.capture(_run("x" * 250)).status == "duplicate"


def test_a_conflict_is_recognised_after_delivery_and_compaction_and_across_hosts(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    layout, key = Layout(data_dir), ids.conversation_key("c-42")
    host.capture(_run())
    [record] = _records(data_dir)
    from memhoncho.delivery.fold import fold

    delivered = {m["id"]: f"h{i}" for i, m in enumerate(record["messages"])}
    ledger = fold(
        Ledger(conversation_id="c-42"),
        [record],
        delivered,
        batch_window=200,
        anchor_window=1000,
        now=1.0,
    )
    write_ledger(layout, key, ledger)
    Outbox(layout).rewrite(key, keep=lambda r: False)
    stored = read_ledger(layout, key)
    assert stored is not None and stored.delivered_digests == {record["batch_id"]: record["digest"]}
    before = _tree(data_dir)
    with Host(config_dir=config_dir, data_dir=data_dir) as other:
        assert other.capture(_run()).status == "duplicate"
        with pytest.raises(RunConflict):
            other.capture(_run("something else"))
    assert _tree(data_dir) == before


def test_a_line_written_before_digests_is_a_duplicate_whatever_its_content(
    host: Host, data_dir: Path
) -> None:
    layout, key = Layout(data_dir), ids.conversation_key("c-42")
    old = {
        "batch_id": batch_id("c-42", "r-1"),
        "conversation_id": "c-42",
        "owner": "ana@example.com",
        "user_peer_id": ids.peer_id("ana@example.com"),
        "run_id": "r-1",
        "captured_at": 1.0,
        "messages": [{"role": "user", "entry_id": 17, "text": "old", "meta": {}, "id": "x-0"}],
    }
    Outbox(layout).append(
        key, old, max_pending=10, delivered_seq=lambda: 0, delivered_before=lambda b: False
    )
    assert host.capture(_run("new")).status == "duplicate"


def test_a_too_large_run_of_a_new_conversation_leaves_the_data_dir_as_it_was(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_batch_bytes=2048)
    before = _tree(data_dir)
    with pytest.raises(CaptureTooLarge):
        host.capture(_run(CONTENT * 200))
    assert _tree(data_dir) == before  # no lock file, no outbox, no folder


@pytest.mark.parametrize(
    "event",
    [
        {k: v for k, v in _run().items() if k != "owner"},
        _run(inputs=[{"entry_id": "17", "text": "x"}]),
        _run(inputs=[{"entry_id": 1, "text": "a\ud800"}]),
    ],
)
def test_a_malformed_run_leaves_the_data_dir_as_it_was(
    host: Host, data_dir: Path, event: dict[str, Any]
) -> None:
    host.capture(_run(run_id="r-0"))
    before = _tree(data_dir)
    with pytest.raises(InvalidEvent):
        host.capture(event)
    assert _tree(data_dir) == before


def test_a_run_without_an_owner_key_is_refused_naming_owner(host: Host) -> None:
    event = {k: v for k, v in _run().items() if k != "owner"}
    with pytest.raises(InvalidEvent) as caught:
        host.capture(event)
    assert caught.value.details["fields"] == ["owner"]
    assert host.capture({**event, "owner": None}).status == "captured"  # explicit None is fine


def test_the_name_user_and_an_ownerless_conversation_reach_different_peers(
    host: Host, data_dir: Path
) -> None:
    host.capture(_run(run_id="r-1", owner=None))
    host.capture(_run(run_id="r-2", owner="user"))
    peers = [r["user_peer_id"] for r in _records(data_dir)]
    assert peers == ["user", "-75ser"]
