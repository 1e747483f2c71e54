"""The delivery engine in process (no Celery), through the real SDK against the stand-in.

Every test runs on both stores (the ``store_url`` fixture): the files and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import delivery_support
import pytest
from delivery_support import (
    CONVERSATION,
    KEY,
    OWNER,
    capture,
    ledger,
    sends,
    texts,
)

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import DeliveryState, deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    StoreError,
)
from memhoncho.models import OUTBOX_ID_KEY, Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings
from memhoncho.testing.runs import expected_texts, run_event

pytestmark = pytest.mark.standin(api_key=KEY)
settings = delivery_support.settings  # a fixture


def test_pending_runs_arrive_in_order_once_with_outbox_ids_in_a_session_configured_first(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(5))
    report = deliver_conversation(deployment, CONVERSATION)

    assert report.state == DeliveryState.DELIVERED
    assert report.delivered_messages == 10
    assert report.first_delivery
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 5)
    sid = ids.session_id(workspace_id, CONVERSATION)
    assert report.session_id == sid
    stored = standin.messages(workspace_id, sid)
    records = deployment.store().records(ids.conversation_key(CONVERSATION))
    outbox_ids = [m["id"] for r in records for m in r["messages"]]
    assert [m["metadata"][OUTBOX_ID_KEY] for m in stored] == outbox_ids
    assert stored[0]["metadata"]["entry_id"] == 0
    assert [m["peer_id"] for m in stored[:2]] == [ids.peer_id(OWNER), "agent"]
    user_config = standin.peer_config(workspace_id, sid, ids.peer_id(OWNER))
    assert user_config == {"observe_me": True, "observe_others": False}
    assert standin.peer_config(workspace_id, sid, "agent") == {
        "observe_me": False,
        "observe_others": True,
    }
    book = ledger(deployment)
    assert book.delivered_seq == records[-1]["seq"]
    assert book.delivered_batches == [r["batch_id"] for r in records]
    assert book.in_flight == [] and book.delivered_partial == []
    assert book.messages_delivered == 10
    assert book.last_error is None
    assert deployment.store().last_delivery() == (book.last_delivered_at, None)
    again = deliver_conversation(deployment, CONVERSATION)
    assert again.state == DeliveryState.IDLE and again.calls == 0
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 5)


def test_every_delivered_entry_folds_an_anchor_to_its_honcho_message(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(3))
    deliver_conversation(deployment, CONVERSATION)

    stored = standin.messages(workspace_id, ids.session_id(workspace_id, CONVERSATION))
    assert ledger(deployment).anchors == [(m["metadata"]["entry_id"], m["id"]) for m in stored]


def test_anchors_and_the_batch_window_keep_only_the_newest(
    host: Host, deployment: Deployment, config_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    write_settings(
        config_dir,
        base_url=standin.url,
        workspace_id=workspace_id,
        anchor_window=10,
        delivered_batch_window=10,
    )
    capture(host, range(30))
    deliver_conversation(deployment, CONVERSATION)

    book = ledger(deployment)
    assert [entry for entry, _ in book.anchors] == list(range(50, 60))
    records = deployment.store().records(ids.conversation_key(CONVERSATION))
    assert book.delivered_batches == [r["batch_id"] for r in records[-10:]]


def test_pending_messages_are_coalesced_up_to_100_a_call(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(120))  # 240 messages
    report = deliver_conversation(deployment, CONVERSATION)

    assert sends(standin) == 3
    assert report.calls == 1 + 3  # the session with its configured members, then three sends
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 120)


def test_a_first_delivery_writes_its_session_id_with_the_first_in_flight_mark(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capture(host, range(120))  # 240 messages: three sends
    store = deployment.store()
    written: list[Ledger] = []
    write = store.write_ledger

    def kept(key: str, book: Ledger) -> None:
        write(key, book)
        written.append(book)

    monkeypatch.setattr(store, "write_ledger", kept)
    deliver_conversation(deployment, CONVERSATION)

    # the mark before the first send, then each send's outcome (with the next mark)
    assert [len(book.in_flight) for book in written] == [100, 100, 40, 0]
    assert written[0].session_id == ids.session_id(workspace_id, CONVERSATION)
    assert written[0].messages_delivered == 0


def test_a_session_made_before_a_crash_that_left_no_ledger_is_found_and_configured_again(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capture(host, range(3))
    store = deployment.store()

    def crash(key: str, book: Ledger) -> None:
        raise StoreError("the worker died before its first write")

    monkeypatch.setattr(store, "write_ledger", crash)
    with pytest.raises(StoreError):
        deliver_conversation(deployment, CONVERSATION)
    monkeypatch.undo()
    sid = ids.session_id(workspace_id, CONVERSATION)
    assert [s["id"] for s in standin.sessions(workspace_id)] == [sid] and sends(standin) == 0
    assert store.read_ledger(ids.conversation_key(CONVERSATION)) is None

    report = deliver_conversation(deployment, CONVERSATION)
    assert report.calls == 3 + 1  # found (200): each member's config set again; one send
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 3)
    user_config = standin.peer_config(workspace_id, sid, ids.peer_id(OWNER))
    assert user_config == {"observe_me": True, "observe_others": False}


def test_a_record_split_across_calls_is_finished_without_resending_its_first_part(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    host.capture(run_event(CONVERSATION, 0, OWNER, inputs=150))  # 151 messages, one record
    first = deliver_conversation(deployment, CONVERSATION, max_calls=2)  # setup (1) + one send

    assert first.state == DeliveryState.MORE
    book = ledger(deployment)
    assert len(book.delivered_partial) == 100
    assert book.delivered_seq == 0
    second = deliver_conversation(deployment, CONVERSATION)

    assert second.state == DeliveryState.DELIVERED
    assert second.delivered_messages == 51
    stored = texts(standin, workspace_id)
    assert len(stored) == 151 and len(set(stored)) == 151
    assert ledger(deployment).delivered_partial == []
    assert ledger(deployment).messages_delivered == 151
