"""A run carries when it happened: ``happened_at`` is validated at capture, kept in the outbox
record and sent to Honcho as each message's ``created_at``; without it, the capture time.

Through the real SDK against the stand-in, on both stores (the ``store_url`` fixture).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import InvalidEvent
from memhoncho.models import CaptureStatus
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.runs import run_event

KEY = "sk-happened-at-key"
CONVERSATION = "imported-1"
OWNER = "ana@example.com"

pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(standin_settings: SettingsWriter, store_url: str | None) -> dict[str, Any]:
    return standin_settings(store_url=store_url)


def stored_times(standin: HonchoStandIn, workspace_id: str) -> list[datetime]:
    sid = ids.session_id(workspace_id, CONVERSATION)
    return [datetime.fromisoformat(m["created_at"]) for m in standin.messages(workspace_id, sid)]


def test_each_message_reaches_honcho_with_the_time_its_run_happened(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    given: list[Any] = [
        "2019-03-04T05:06:07.123456+09:00",  # an offset, microseconds
        1_600_000_000,  # Unix seconds
        datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),  # a Python host's aware datetime
    ]
    for i, when in enumerate(given):
        host.capture({**run_event(CONVERSATION, i, OWNER), "happened_at": when})
    before = time.time()
    host.capture(run_event(CONVERSATION, 3, OWNER))  # no time given: the capture's
    after = time.time()

    deliver_conversation(deployment, CONVERSATION)

    times = stored_times(standin, workspace_id)
    expected = [
        datetime(2019, 3, 3, 20, 6, 7, 123456, tzinfo=UTC),
        datetime(2020, 9, 13, 12, 26, 40, tzinfo=UTC),
        datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    assert times[:6] == [t for t in expected for _ in (0, 1)]  # the input and its answer
    assert before - 1 <= times[6].timestamp() <= after + 1
    records = deployment.store().records(ids.conversation_key(CONVERSATION))
    assert records[0]["happened_at"] == "2019-03-03T20:06:07.123456+00:00"
    assert "happened_at" not in records[3]


@pytest.mark.parametrize(
    "bad",
    [
        "2024-01-02T03:04:05",  # naive: which zone?
        "last tuesday",
        1_700_000_000_000,  # milliseconds sent as seconds
        -1,
        float("nan"),
        True,
        ["2024-01-02T03:04:05Z"],
    ],
    ids=["naive", "words", "milliseconds", "negative", "nan", "bool", "list"],
)
def test_a_time_that_is_not_an_aware_instant_is_refused_and_nothing_is_written(
    host: Host, deployment: Deployment, bad: Any
) -> None:
    with pytest.raises(InvalidEvent) as refused:
        host.capture({**run_event(CONVERSATION, 0, OWNER), "happened_at": bad})
    assert refused.value.code == "ERR_INVALID_EVENT"
    assert refused.value.details["fields"] == ["happened_at"]
    assert "timezone-aware ISO 8601" in refused.value.message
    assert deployment.store().records(ids.conversation_key(CONVERSATION)) == []


def test_the_same_run_captured_again_with_another_time_is_a_duplicate_the_first_time_kept(
    host: Host, deployment: Deployment
) -> None:
    run = run_event(CONVERSATION, 0, OWNER)
    first = host.capture({**run, "happened_at": "2020-01-01T00:00:00Z"})
    again = host.capture({**run, "happened_at": "2021-01-01T00:00:00Z"})
    assert (first.status, again.status) == (CaptureStatus.CAPTURED, CaptureStatus.DUPLICATE)
    records = deployment.store().records(ids.conversation_key(CONVERSATION))
    assert [r["happened_at"] for r in records] == ["2020-01-01T00:00:00+00:00"]
