"""The fence helper and the task's answer to it: come back when it opens, by countdown."""

from __future__ import annotations

from typing import Any

import pytest
from celery.exceptions import Retry

from memhoncho.delivery import fence
from memhoncho.errors import InFlightSettling, LockBusy
from memhoncho.settings import Settings


def test_the_fence_opens_after_the_whole_requests_deadline_plus_the_margin() -> None:
    settings = Settings(honcho_timeout_s=2.0, send_settle_s=3.0)
    assert fence.window_s(settings) == 2.0 + 3.0  # one deadline for the request; settle
    assert fence.remaining_s(100.0, settings, now=101.0) == 4.0
    assert fence.remaining_s(100.0, settings, now=105.0) == 0.0
    with pytest.raises(InFlightSettling) as settling:
        fence.check(100.0, settings, "a send", now=104.5)
    assert settling.value.wait_s == 0.5
    assert isinstance(settling.value, LockBusy)  # contention, not a failure
    fence.check(100.0, settings, "a send", now=105.0)  # open: no error


def test_the_default_fence_is_a_minute() -> None:
    assert fence.window_s(Settings()) == 60.0  # 30 s for the whole request, 30 s to settle


def test_with_the_fence_off_nothing_waits() -> None:
    settings = Settings(honcho_timeout_s=2.0, send_settle_s=3.0, send_fence=False)
    fence.check(100.0, settings, "a send", now=100.0)


def test_a_fenced_delivery_is_retried_when_the_fence_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memhoncho.delivery import engine
    from memhoncho.worker import tasks

    def settling(*_: Any, **__: Any) -> None:
        raise InFlightSettling(wait_s=3.0)

    asked: dict[str, Any] = {}

    def retry(**options: Any) -> Retry:
        asked.update(options)
        return Retry("retry", None)

    monkeypatch.setattr(engine, "deliver_conversation", settling)
    monkeypatch.setattr(tasks, "task_context", lambda app: None)  # no app built in this test
    monkeypatch.setattr(tasks.deliver, "retry", retry)
    with pytest.raises(Retry):
        tasks.deliver("c-1")
    assert 3.0 <= asked["countdown"] <= 3.0 + tasks.FENCE_SLACK_S
    assert "kwargs" not in asked  # the failures in a row are the ledger's, not the message's
