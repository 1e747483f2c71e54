"""Parked conversations in the status: since when delivery fails and why, healthy once they
have delivered (issue 26)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import HonchoUnreachable
from memhoncho.settings import Settings
from memhoncho.status import health
from memhoncho.status.view import status_view
from memhoncho.store import parked
from memhoncho.store.layout import Layout
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.runs import run_event

KEY = "sk-parked-test-key"
CONVERSATION = "conv-1"
OWNER = "ana@example.com"
SINCE = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def test_a_park_keeps_when_the_failures_began_counts_them_and_ends_at_delivery(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    assert parked.summary(layout, SINCE, stale_s=60.0)["conversations"] == 0
    parked.park(layout, "k-1", "ERR_HONCHO_UNREACHABLE", SINCE)
    parked.park(layout, "k-1", "ERR_HONCHO_UNAVAILABLE", SINCE + 5)
    parked.park(layout, "k-2", "ERR_HONCHO_UNREACHABLE", SINCE + 3)
    found = parked.summary(layout, SINCE + 6, stale_s=60.0)
    assert found == {
        "conversations": 2,
        "since": SINCE,
        "last_at": SINCE + 5,
        "last_code": "ERR_HONCHO_UNAVAILABLE",
        "most_failures": 2,
    }
    assert parked.summary(layout, SINCE + 64, stale_s=60.0)["conversations"] == 1  # k-1 renewed
    parked.unpark(layout, "k-1")
    parked.unpark(layout, "k-1")  # twice: harmless
    assert parked.summary(layout, SINCE + 6, stale_s=60.0)["conversations"] == 1


def _view(parked_figures: dict[str, Any], pending: int) -> dict[str, Any]:
    return {
        "generated_at": SINCE + 95,
        "parked": {"state": "ok", **parked_figures},
        "outbox": {"state": "ok", "conversations_pending": pending, "oldest_pending_age_s": 1.0},
    }


PARKED = {
    "conversations": 3,
    "since": SINCE,
    "last_at": SINCE + 90,
    "last_code": "ERR_HONCHO_UNREACHABLE",
    "most_failures": 7,
}


def test_the_verdict_says_since_when_and_why_conversations_cannot_deliver() -> None:
    found = health.verdict(_view(PARKED, pending=3), Settings())
    assert found["verdict"] == health.FAILING
    assert found["reasons"][0] == (
        "3 conversation(s) cannot deliver: failing since 2027-01-15 08:00:00 UTC (95 s ago),"
        " last error ERR_HONCHO_UNREACHABLE"
    )


@pytest.mark.parametrize(
    ("figures", "pending"),
    [
        (PARKED, 0),  # everything delivered: a park left behind is moot
        ({**PARKED, "most_failures": 2}, 3),  # a retry or two is ordinary weather
        ({**PARKED, "conversations": 0, "since": None}, 3),  # nothing parked
    ],
    ids=["delivered", "few-failures", "none"],
)
def test_no_failing_verdict_without_a_conversation_that_keeps_failing(
    figures: dict[str, Any], pending: int
) -> None:
    found = health.verdict(_view(figures, pending=pending), Settings())
    assert not any("cannot deliver" in reason for reason in found["reasons"])


@pytest.mark.standin(api_key=KEY)
def test_status_fails_while_honcho_refuses_and_clears_once_the_parked_one_delivered(
    config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    point_at_standin(config_dir, standin, workspace_id, KEY, honcho_timeout_s=10.0)
    deployment = Deployment(config_dir, data_dir)
    with Host(config_dir, data_dir) as host:
        host.capture(run_event(CONVERSATION, 0, OWNER))
    standin.stop()
    started = time.time()
    try:
        for _ in range(health.FAILING_AFTER):
            with pytest.raises(HonchoUnreachable):
                deliver_conversation(deployment, CONVERSATION)
        failing = status_view(deployment)
    finally:
        standin.start()
    assert failing["health"]["verdict"] == health.FAILING
    reason = next(r for r in failing["health"]["reasons"] if "cannot deliver" in r)
    assert reason.startswith("1 conversation(s) cannot deliver: failing since ")
    assert reason.endswith("last error ERR_HONCHO_UNREACHABLE")
    assert started <= failing["parked"]["since"] <= time.time()

    deliver_conversation(deployment, CONVERSATION)
    healed = status_view(deployment)
    assert healed["parked"]["conversations"] == 0
    assert not any("cannot deliver" in r for r in healed["health"]["reasons"])
    key = ids.conversation_key(CONVERSATION)
    assert not (parked.parked_dir(deployment.layout) / key).exists()


def _refresh_failing(code: str, failed_at: float, delivered_at: float) -> dict[str, Any]:
    task = {"consecutive_failures": 6, "last_error_code": code, "last_error_at": failed_at}
    return {
        "last_delivery_at": delivered_at,
        "tasks": {"state": "ok", "tasks": {"memhoncho.refresh_representation": task}},
    }


def test_a_task_failed_by_an_outage_stops_failing_the_verdict_once_a_delivery_went_through() -> (
    None
):
    over = health.verdict(_refresh_failing("ERR_HONCHO_UNREACHABLE", SINCE, SINCE + 9), Settings())
    assert over["verdict"] == health.HEALTHY, over
    going_on = _refresh_failing("ERR_HONCHO_UNREACHABLE", SINCE + 9, SINCE)
    assert health.verdict(going_on, Settings())["verdict"] == health.FAILING
    its_own = _refresh_failing("ERR_HONCHO_REJECTED", SINCE, SINCE + 9)  # not Honcho's absence
    assert health.verdict(its_own, Settings())["verdict"] == health.FAILING
