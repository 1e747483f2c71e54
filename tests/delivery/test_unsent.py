"""The fence only where a late commit is possible (issue 26), the engine in process.

A send that never reached Honcho (connection refused) leaves no in-flight mark, so the next
attempt sends at once; a send that may have reached it (an answer trickled past the request's
deadline) keeps its mark, fenced for one deadline and the settle margin. Both stores.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import fence
from memhoncho.delivery.engine import DeliveryState, deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import HonchoTimeout, HonchoUnreachable, InFlightSettling
from memhoncho.models import OUTBOX_ID_KEY, Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.runs import expected_texts, run_event

KEY = "sk-unsent-test-key"
CONVERSATION = "conv-1"
OWNER = "ana@example.com"
TIMEOUT_S = 0.5  # seconds: the client's timeout, for the whole request, where a test plans one
SETTLE_S = 1.0  # seconds: the fence's settle margin
TRICKLE_S = 2.5  # seconds a trickled answer takes: five times the timeout

pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(
    standin_settings: SettingsWriter, store_url: str | None, honcho_timeout_s: float
) -> dict[str, Any]:
    return standin_settings(
        honcho_timeout_s=honcho_timeout_s, send_settle_s=SETTLE_S, store_url=store_url
    )


def ledger(deployment: Deployment) -> Ledger:
    found = deployment.store().read_ledger(ids.conversation_key(CONVERSATION))
    assert found is not None
    return found


def stored(standin: HonchoStandIn, workspace_id: str) -> list[dict[str, Any]]:
    return standin.messages(workspace_id, ids.session_id(workspace_id, CONVERSATION))


def assert_each_once_in_order(standin: HonchoStandIn, workspace_id: str, runs: int) -> None:
    messages = stored(standin, workspace_id)
    assert [m["content"] for m in messages] == expected_texts(CONVERSATION, runs)
    assert max(Counter(m["metadata"][OUTBOX_ID_KEY] for m in messages).values()) == 1


def test_a_refused_send_leaves_no_mark_and_the_next_attempt_sends_at_once(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    host.capture(run_event(CONVERSATION, 0, OWNER))
    deliver_conversation(deployment, CONVERSATION)  # the session exists
    host.capture(run_event(CONVERSATION, 1, OWNER))
    standin.stop()
    try:
        with pytest.raises(HonchoUnreachable):
            deliver_conversation(deployment, CONVERSATION)
        book = ledger(deployment)
        assert book.in_flight == [] and book.in_flight_since is None
        assert book.last_error is not None
        assert book.last_error["code"] == "ERR_HONCHO_UNREACHABLE"
        assert book.failures == 1
    finally:
        standin.start()  # Honcho is back, on the same port
    report = deliver_conversation(deployment, CONVERSATION)  # no InFlightSettling: no fence
    assert report.state == DeliveryState.DELIVERED and report.delivered_messages == 2
    assert report.recovered_messages == 0
    assert_each_once_in_order(standin, workspace_id, 2)
    assert ledger(deployment).last_error is None


@pytest.mark.parametrize("honcho_timeout_s", [TIMEOUT_S], ids=["fast-timeout"])
def test_a_send_that_may_have_landed_is_fenced_for_one_deadline_and_the_margin(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    host.capture(run_event(CONVERSATION, 0, OWNER))
    standin.faults.add("trickle", method="POST", path_endswith="/messages", sleep_s=TRICKLE_S)
    started = time.monotonic()
    with pytest.raises(HonchoTimeout):
        deliver_conversation(deployment, CONVERSATION)
    assert time.monotonic() - started < TRICKLE_S  # the request's deadline ended it
    mark = ledger(deployment)
    assert mark.in_flight and mark.in_flight_since is not None  # it was stored: kept
    assert fence.window_s(deployment.settings()) == TIMEOUT_S + SETTLE_S
    asked = time.time()
    with pytest.raises(InFlightSettling) as settling:
        deliver_conversation(deployment, CONVERSATION)
    answered = time.time()
    opens_at = mark.in_flight_since + TIMEOUT_S + SETTLE_S
    assert opens_at - answered <= settling.value.wait_s <= opens_at - asked
    time.sleep(settling.value.wait_s + 0.01)
    report = deliver_conversation(deployment, CONVERSATION)
    assert report.recovered_messages == 2 and report.delivered_messages == 0
    assert_each_once_in_order(standin, workspace_id, 1)
