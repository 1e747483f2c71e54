"""A record captured after a delivery's last look, before its lock is released, is delivered
by that same delivery, once and in order (the engine in process, both stores).

Its hint was published while the lock was held, so that hint meets the lock and retries about
half a second later; the delivery looks once more after the release instead of leaving it.
"""

from __future__ import annotations

from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import DeliveryState, deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.store import parked
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.runs import expected_texts, run_event

KEY = "sk-relook-test-key"
CONVERSATION = "conv-relook"
OWNER = "ana@example.com"

pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(standin_settings: SettingsWriter, store_url: str | None) -> dict[str, Any]:
    return standin_settings(store_url=store_url)


def test_a_capture_after_the_last_look_is_delivered_by_the_same_delivery(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host.capture(run_event(CONVERSATION, 0, OWNER))
    unpark = parked.unpark
    late: list[bool] = []

    def capture_late(*args: Any) -> None:
        # Under the lock, after the run's last look: as a host capturing at that moment.
        if not late:
            late.append(host.capture(run_event(CONVERSATION, 1, OWNER)).enqueued)
        unpark(*args)

    monkeypatch.setattr(parked, "unpark", capture_late)
    report = deliver_conversation(deployment, CONVERSATION)

    assert late == [True]  # its hint went out: the first run had taken the mark
    assert report.state == DeliveryState.DELIVERED
    assert report.delivered_messages == 4
    assert report.first_delivery
    sid = ids.session_id(workspace_id, CONVERSATION)
    assert [m["content"] for m in standin.messages(workspace_id, sid)] == expected_texts(
        CONVERSATION, 2
    )
    again = deliver_conversation(deployment, CONVERSATION)  # the late hint's retry
    assert again.state == DeliveryState.IDLE and again.calls == 0
    ledger = deployment.store().read_ledger(ids.conversation_key(CONVERSATION))
    assert ledger is not None and ledger.messages_delivered == 4
