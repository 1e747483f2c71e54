"""The delivery engine in process (no Celery) when Honcho fails: sends that failed yet were stored,
rate limits, server errors, the fence, a full disk, a held lock, a missing key. Every test runs
on both stores (the store_url fixture): the files and PostgreSQL.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import delivery_support
import pytest
from delivery_support import (
    CONVERSATION,
    FAST_TIMEOUT_S,
    FAULT_SLEEP_S,
    KEY,
    OWNER,
    SETTLE_S,
    capture,
    deliver_after_fence,
    fast_timeout,
    ledger,
    sends,
    texts,
)

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import fence, forks
from memhoncho.delivery.engine import DeliveryState, deliver_conversation, failures_in_a_row
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoRateLimited,
    HonchoRejected,
    HonchoTimeout,
    HonchoUnavailable,
    InFlightSettling,
    LockBusy,
    MemhonchoError,
    MissingApiKey,
    StoreError,
)
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY, ForkRecord, Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings
from memhoncho.testing.runs import expected_texts

pytestmark = pytest.mark.standin(api_key=KEY)
settings = delivery_support.settings  # a fixture


@pytest.mark.parametrize(
    ("fault", "options", "error", "held_at_the_error"),
    [
        # stored, then the answer came too late for the client
        ("timeout_after_commit", {"sleep_s": FAULT_SLEEP_S}, HonchoTimeout, 6),
        # stored, then a gateway answered 429
        ("http_429", {"after_commit": True}, HonchoRateLimited, 6),
        # held past the client's timeout and only then stored: nothing yet when it gives up
        ("late_commit", {"sleep_s": FAULT_SLEEP_S}, HonchoTimeout, 0),
    ],
    ids=["timeout-after-commit", "429-after-commit", "late-commit"],
)
@fast_timeout
def test_a_send_that_failed_yet_was_stored_is_found_in_honcho_not_sent_again(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    fault: str,
    options: dict[str, Any],
    error: type[MemhonchoError],
    held_at_the_error: int,
) -> None:
    capture(host, range(3))
    standin.faults.add(fault, path_contains="/messages", **options)

    with pytest.raises(error):
        deliver_conversation(deployment, CONVERSATION)
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 3)[:held_at_the_error]
    book = ledger(deployment)
    assert len(book.in_flight) == 6
    assert book.last_error is not None and book.last_error["code"] == error.code
    capture(host, range(3, 4))
    report = deliver_after_fence(deployment)

    assert report.recovered_messages == 6
    assert report.delivered_messages == 2
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 4)
    assert ledger(deployment).in_flight == []
    assert ledger(deployment).last_error is None
    assert ledger(deployment).messages_delivered == 8


@fast_timeout
def test_an_in_flight_mark_found_at_start_sends_only_what_honcho_lacks(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    """A worker died between its send and its ledger write: half the mark was stored."""
    capture(host, range(4))
    key = ids.conversation_key(CONVERSATION)
    records = deployment.store().records(key)
    sid = ids.session_id(workspace_id, CONVERSATION)
    client = adapter.write_client(deployment.honcho_target())
    adapter.ensure_session(client, sid, ids.peer_id(OWNER), "agent")
    first_two = [m for r in records[:2] for m in r["messages"]]
    adapter.add_messages(
        client,
        sid,
        [
            adapter.OutgoingMessage(
                ids.peer_id(OWNER) if m["role"] == "user" else "agent",
                m["text"],
                {**m["meta"], OUTBOX_ID_KEY: m["id"]},
            )
            for m in first_two
        ],
    )
    in_flight = [m["id"] for r in records for m in r["messages"]]
    deployment.store().write_ledger(
        key,
        Ledger(conversation_id=CONVERSATION, owner=OWNER, session_id=sid, in_flight=in_flight),
    )
    report = deliver_after_fence(deployment)  # a mark of unknown start: fenced from now

    assert report.recovered_messages == 4
    assert report.delivered_messages == 4
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 4)
    assert ledger(deployment).delivered_seq == records[-1]["seq"]


def test_a_permanent_refusal_is_recorded_and_leaves_every_record_pending(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(3))
    standin.api_key = "another-key"  # every call now answers 401

    with pytest.raises(HonchoRejected) as refused:
        deliver_conversation(deployment, CONVERSATION)
    assert not adapter.classify(refused.value, 1).retry
    assert KEY not in str(refused.value.as_dict())
    book = ledger(deployment)
    assert book.last_error is not None
    assert book.last_error["code"] == HonchoRejected.code
    assert book.last_error["status"] == 401
    assert book.delivered_seq == 0 and book.in_flight == []
    key = ids.conversation_key(CONVERSATION)
    assert len(deployment.store().pending(key, book.delivered_seq)) == 3
    standin.api_key = KEY
    deliver_conversation(deployment, CONVERSATION)

    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 3)
    assert ledger(deployment).last_error is None


@fast_timeout
def test_a_rate_limit_keeps_the_mark_and_the_retry_reconciles_before_sending_each_once(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(2))
    deliver_conversation(deployment, CONVERSATION)
    capture(host, range(2, 4))
    standin.faults.add("http_429", path_contains="/messages", retry_after_s=7)

    with pytest.raises(HonchoRateLimited) as limited:
        deliver_conversation(deployment, CONVERSATION)
    decision = adapter.classify(limited.value, 1)
    assert decision.retry and decision.delay_s == 7
    assert len(ledger(deployment).in_flight) == 4  # a gateway's 429 may follow a commit
    report = deliver_after_fence(deployment)

    assert report.recovered_messages == 0 and report.calls == 2  # the find, then the send
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 4)


@fast_timeout
def test_a_server_error_keeps_the_mark_and_the_retry_sends_each_message_once(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(2))
    standin.faults.add("http_503", path_contains="/messages")

    with pytest.raises(HonchoUnavailable) as failed:
        deliver_conversation(deployment, CONVERSATION)
    assert adapter.classify(failed.value, 1).retry
    assert len(ledger(deployment).in_flight) == 4
    deliver_after_fence(deployment)

    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 2)


@fast_timeout
def test_the_ledger_counts_honcho_failures_in_a_row_until_a_message_is_delivered(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(2))
    standin.faults.add("http_503", path_contains="/messages", count=3)

    # The send fails, then twice the fenced reconcile (``/messages/list``) that must come first.
    for expected in (1, 2, 3):
        with pytest.raises(HonchoUnavailable):
            deliver_after_fence(deployment)
        assert failures_in_a_row(deployment, CONVERSATION) == expected
    deliver_after_fence(deployment)

    assert failures_in_a_row(deployment, CONVERSATION) == 0
    assert ledger(deployment).failures == 0
    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 2)


@fast_timeout
def test_a_failed_send_is_not_reconciled_or_resent_before_its_fence_opens(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    capture(host, range(2))
    standin.faults.add("timeout_before_commit", path_contains="/messages", sleep_s=0.6)
    started = time.time()
    with pytest.raises(HonchoTimeout):
        deliver_conversation(deployment, CONVERSATION)
    mark = ledger(deployment)
    assert mark.in_flight_since is not None and started <= mark.in_flight_since <= time.time()
    requests = standin.request_count()

    asked = time.time()
    with pytest.raises(InFlightSettling) as settling:
        deliver_conversation(deployment, CONVERSATION)
    answered = time.time()
    opens_at = mark.in_flight_since + fence.window_s(deployment.settings())
    assert fence.window_s(deployment.settings()) == FAST_TIMEOUT_S + SETTLE_S
    # the time left when it was asked, whatever the machine's load made the call take
    assert opens_at - answered <= settling.value.wait_s <= opens_at - asked
    assert standin.request_count() == requests  # not a read, not a send
    assert ledger(deployment).in_flight == mark.in_flight


def test_without_the_fence_a_late_commit_is_stored_twice(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    config_dir: Path,
) -> None:
    """What the fence prevents, shown with it off: the reconcile runs before the commit."""
    write_settings(
        config_dir,
        base_url=standin.url,
        workspace_id=workspace_id,
        honcho_timeout_s=FAST_TIMEOUT_S,
        send_fence=False,
    )
    capture(host, range(3))
    standin.faults.add("late_commit", path_contains="/messages", sleep_s=FAULT_SLEEP_S)
    with pytest.raises(HonchoTimeout):
        deliver_conversation(deployment, CONVERSATION)
    deliver_conversation(deployment, CONVERSATION)
    time.sleep(FAULT_SLEEP_S)  # the held request commits

    assert texts(standin, workspace_id) == expected_texts(CONVERSATION, 3) * 2


def test_a_full_disk_during_delivery_is_a_store_error_and_the_records_stay_pending(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    monkeypatch: pytest.MonkeyPatch,
    store_url: str | None,
) -> None:
    if store_url is not None:
        pytest.skip(
            "a full disk is the file store's failure; the database's is ERR_STORE_UNAVAILABLE"
        )
    capture(host, range(2))

    def no_space(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)  # every atomic state write
    with pytest.raises(StoreError) as refused:
        deliver_conversation(deployment, CONVERSATION)
    monkeypatch.undo()
    assert refused.value.code == "ERR_STORE"
    key = ids.conversation_key(CONVERSATION)
    assert len(deployment.store().pending(key, 0)) == 2
    assert deliver_after_fence(deployment).state == DeliveryState.DELIVERED


def test_a_held_conversation_lock_makes_delivery_busy_and_changes_nothing(
    host: Host, deployment: Deployment, standin: HonchoStandIn
) -> None:
    capture(host, range(1))
    key = ids.conversation_key(CONVERSATION)
    with deployment.store().conversation_lock(key), pytest.raises(LockBusy):
        deliver_conversation(deployment, CONVERSATION)
    assert deployment.store().read_ledger(key) is None
    assert sends(standin) == 0


def test_nothing_pending_needs_no_key_and_no_call(
    deployment: Deployment, config_dir: Path, standin: HonchoStandIn
) -> None:
    (config_dir / "secrets.json").unlink()
    report = deliver_conversation(deployment, "never-captured")
    assert report.state == DeliveryState.IDLE
    assert standin.request_count() == 0


def test_pending_work_without_a_key_raises_missing_api_key_and_stays_pending(
    host: Host, deployment: Deployment, config_dir: Path
) -> None:
    capture(host, range(1))
    (config_dir / "secrets.json").unlink()
    with pytest.raises(MissingApiKey):
        deliver_conversation(deployment, CONVERSATION)
    key = ids.conversation_key(CONVERSATION)
    assert len(deployment.store().pending(key, 0)) == 1


def test_a_pending_fork_is_resolved_before_any_message(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, str]] = []

    def resolve_pending_fork(
        ctx: Deployment, client: Any, key: str, conversation_id: str, book: Ledger
    ) -> Ledger:
        calls.append((key, conversation_id))
        return book.model_copy(update={"session_id": "chosen_by_the_fork"})

    monkeypatch.setattr(forks, "resolve_pending_fork", resolve_pending_fork)
    key = ids.conversation_key(CONVERSATION)
    deployment.store().create_fork(
        key, ForkRecord(parent_id="p", child_id=CONVERSATION, at_entry=0, created_at=0.0)
    )
    capture(host, range(2))
    report = deliver_conversation(deployment, CONVERSATION)

    assert calls == [(key, CONVERSATION)]
    assert report.session_id == "chosen_by_the_fork"
    assert [m["content"] for m in standin.messages(workspace_id, "chosen_by_the_fork")] == (
        expected_texts(CONVERSATION, 2)
    )
