"""Stranded conversations in the status view, the verdict, /metrics and doctor (issue 29).

A delivery that started (it took the hint mark) and died leaves pending records with nothing
queued or running for them: counted and named once past their bound, the verdict degraded,
failing once more than a minute past it; a running delivery (its lock held) or a waiting hint
is not stranded; a delivery clears it. On the files and on PostgreSQL.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.cli import doctor_stranded
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.status import health, render
from memhoncho.status import stranded as status_stranded
from memhoncho.status.view import status_view
from memhoncho.store import hint_marks, stranded
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.runs import run_event

KEY = "sk-stranded-status-key"
OWNER = "ana@example.com"
WAIT_S = 10.0  # seconds at most for a conversation to pass its bound (SETTLE_S after capture)
pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def deployment(
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    store_url: str | None,
) -> Deployment:
    point_at_standin(config_dir, standin, workspace_id, KEY, store_url=store_url)
    return Deployment(config_dir, data_dir)


def _died_mid_delivery(deployment: Deployment, conversation_id: str, runs: int = 2) -> str:
    """Captures whose delivery started (it took the hint mark) and then died."""
    with Host(deployment.config_dir, deployment.data_dir) as host:
        for run in range(runs):
            host.capture(run_event(conversation_id, run, OWNER))
    key = ids.conversation_key(conversation_id)
    deployment.store().take_hint(key)
    return key


def _stranded_view(deployment: Deployment) -> dict[str, Any]:
    """The view once the conversation is past its bound (a look every 0.1 s)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        view = status_view(deployment)
        if view["stranded"]["count"] or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def test_a_stranded_conversation_is_counted_named_turns_the_verdict_and_clears(
    deployment: Deployment,
) -> None:
    _died_mid_delivery(deployment, "conv-stranded")
    view = _stranded_view(deployment)
    found = view["stranded"]
    assert found["count"] == 1, found
    assert found["conversations"][0]["conversation_id"] == "conv-stranded"
    assert 0 < found["oldest_past_bound_s"] < status_stranded.FAILING_PAST_S
    reason = next(r for r in view["health"]["reasons"] if "nothing queued or running" in r)
    assert reason.endswith(": conv-stranded")
    assert view["health"]["verdict"] in (health.DEGRADED, health.STALLED, health.FAILING)
    assert ("stranded", "count", "1") in render.rows(view)
    assert "memhoncho_stranded_conversations 1.0" in render.prometheus(view)

    deliver_conversation(deployment, "conv-stranded")
    cleared = status_view(deployment)
    assert cleared["stranded"] == {
        "state": "ok",
        "count": 0,
        "oldest_past_bound_s": 0.0,
        "conversations": [],
    }
    assert not any("nothing queued or running" in r for r in cleared["health"]["reasons"])
    assert doctor_stranded.finding(deployment)[0] == doctor_stranded.PASS


def test_more_than_a_minute_past_its_bound_fails_the_verdict_and_doctor_naming_it(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    _died_mid_delivery(deployment, "conv-late")
    view = _stranded_view(deployment)
    assert view["stranded"]["count"] == 1
    later = time.time() + status_stranded.FAILING_PAST_S + 5
    view["stranded"] = status_stranded.bucket(deployment, deployment.settings(), now=later)
    verdict = health.verdict(view, deployment.settings())
    assert verdict["verdict"] == health.FAILING
    assert any(
        r.endswith("conv-late (does a worker of this deployment run?)") for r in verdict["reasons"]
    )

    verdict_now, detail, _ = doctor_stranded.finding(deployment)
    assert verdict_now == doctor_stranded.WARN, detail  # the watchdog's next look takes it
    monkeypatch.setattr(doctor_stranded, "GRACE_S", 0.0)
    verdict_late, detail, action = doctor_stranded.finding(deployment)
    assert verdict_late == doctor_stranded.FAIL
    assert detail.endswith(": conv-late") and "worker" in action


def test_a_running_delivery_or_a_waiting_hint_is_not_stranded(deployment: Deployment) -> None:
    key = _died_mid_delivery(deployment, "conv-busy")
    store, settings = deployment.store(), deployment.settings()
    assert _stranded_view(deployment)["stranded"]["count"] == 1
    with store.conversation_lock(key, timeout_s=0):  # a live delivery holds it
        assert stranded.find(store, settings) == []
    assert store.claim_hint(key)  # a hint now waits
    assert stranded.find(store, settings) == []
    stale = time.time() + hint_marks.STALE_S + stranded.SETTLE_S + 1
    assert [s.key for s in stranded.find(store, settings, now=stale)] == [key]


def test_a_send_that_may_have_landed_is_stranded_only_past_its_fence(
    deployment: Deployment,
) -> None:
    key = _died_mid_delivery(deployment, "conv-fenced")
    store, settings = deployment.store(), deployment.settings()
    started = time.time()
    ledger = store.read_ledger(key)
    assert ledger is None
    from memhoncho.models import Ledger

    store.write_ledger(
        key,
        Ledger(conversation_id="conv-fenced", in_flight=["x"], in_flight_since=started),
    )
    fence_end = started + settings.honcho_timeout_s + settings.send_settle_s
    assert stranded.find(store, settings, now=fence_end - 1) == []
    found = stranded.find(store, settings, now=fence_end + stranded.SETTLE_S + 1)
    assert [(s.conversation_id, s.bound_at) for s in found] == [("conv-fenced", fence_end)]


def test_a_retry_that_waits_out_a_long_retry_after_is_not_stranded_before_it_is_due(
    deployment: Deployment,
) -> None:
    # Honcho asked for 300 s: the failed task's retry claims the mark dated when it is due, so
    # the watchdog does not take it for a lost hint after FAILED_GRACE_S and call Honcho early.
    from celery.exceptions import Retry

    from memhoncho.errors import HonchoRateLimited
    from memhoncho.worker import tasks

    key = _died_mid_delivery(deployment, "conv-retry-after")
    store, settings = deployment.store(), deployment.settings()
    failed = time.time()
    ledger = store.read_ledger(key) or Ledger(conversation_id="conv-retry-after")
    error = {"code": "ERR_HONCHO_RATE_LIMITED", "message": "slow down", "at": failed}
    store.write_ledger(key, ledger.model_copy(update={"failures": 1, "last_error": error}))

    class _Task:
        def retry(self, countdown: float) -> Exception:
            return Retry(when=countdown)

    with pytest.raises(Retry) as queued:
        tasks._retry_or_give_up(
            _Task(),
            HonchoRateLimited("slow down", status=429, retry_after_s=300.0),
            attempt=1,
            max_attempts=tasks.DELIVER_MAX_FAILURES,
            default_delay_s=tasks.LOCK_RETRY_S,
            action="delivery_gave_up",
            message="gave up",
            claim=tasks._claim_retry(deployment, "conv-retry-after"),
        )
    assert queued.value.when == 300.0
    mark_at = store.hint_mark_at(key)
    assert mark_at is not None and mark_at >= failed + 300.0 - 1
    store.renew_hint(key)  # its worker received the retry: the date stays
    assert (store.hint_mark_at(key) or 0) >= failed + 300.0 - 1
    past_grace = failed + stranded.FAILED_GRACE_S + stranded.SETTLE_S + 1
    assert stranded.find(store, settings, now=past_grace) == []
    past_due = failed + 300.0 + hint_marks.STALE_S + stranded.SETTLE_S + 1
    assert [s.key for s in stranded.find(store, settings, now=past_due)] == [key]
