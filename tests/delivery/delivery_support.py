"""What the in-process delivery tests share: their settings, captures, and looks at the stand-in
and the ledger.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    InFlightSettling,
)
from memhoncho.models import Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.runs import run_event

KEY = "sk-delivery-test-key"
CONVERSATION = "conv-1"
OWNER = "ana@example.com"
FAST_TIMEOUT_S = 0.5  # seconds: the client's Honcho timeout where a timeout fault is planned
FAULT_SLEEP_S = 1.0  # seconds a timeout fault holds the request: past FAST_TIMEOUT_S
SETTLE_S = 0.8  # seconds: the fence's settle margin (the fence: 0.5 + 0.8 > FAULT_SLEEP_S)


#: for a test that plans a timeout or waits for a fence to open (the timeout + SETTLE_S); the
#: others take the calm ``honcho_timeout_s`` fixture (memhoncho.testing.pytest_plugin)
fast_timeout = pytest.mark.parametrize("honcho_timeout_s", [FAST_TIMEOUT_S], ids=["fast-timeout"])


@pytest.fixture
def settings(
    standin_settings: SettingsWriter, store_url: str | None, honcho_timeout_s: float
) -> dict[str, Any]:
    return standin_settings(
        honcho_timeout_s=honcho_timeout_s, store_url=store_url, send_settle_s=SETTLE_S
    )


def capture(host: Host, runs: range, conversation: str = CONVERSATION, **options: Any) -> None:
    for i in runs:
        host.capture(run_event(conversation, i, OWNER, **options))


def texts(standin: HonchoStandIn, workspace_id: str, conversation: str = CONVERSATION) -> list[str]:
    sid = ids.session_id(workspace_id, conversation)
    return [m["content"] for m in standin.messages(workspace_id, sid)]


def sends(standin: HonchoStandIn) -> int:
    """add_messages requests the stand-in received (answered or not)."""
    return sum(
        1
        for method, path, _ in standin.state()["requests"]
        if method == "POST" and path.endswith("/messages")
    )


def deliver_after_fence(deployment: Deployment, conversation: str = CONVERSATION) -> Any:
    """Deliver, coming back when the fence opens as the task's countdown does."""
    for _ in range(3):
        try:
            return deliver_conversation(deployment, conversation)
        except InFlightSettling as exc:
            time.sleep(exc.wait_s + 0.01)
    raise AssertionError("the fence never opened")


def ledger(deployment: Deployment, conversation: str = CONVERSATION) -> Ledger:
    found = deployment.store().read_ledger(ids.conversation_key(conversation))
    assert found is not None
    return found
