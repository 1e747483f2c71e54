"""The watchdog's pause between looks: cheap while looks are quick, the promise kept while slow."""

from __future__ import annotations

import pytest

from memhoncho.store import stranded
from memhoncho.worker import watchdog


def _worst_wait(took: float) -> float:
    """From a conversation's bound to its hint, when it strands just after a look checked it."""
    return stranded.SETTLE_S + took + watchdog.pause_after(took) + took


@pytest.mark.parametrize("took", [0.01, 0.5, 1.0, 2.0])
def test_quick_looks_come_every_interval_or_five_looks(took: float) -> None:
    cycle = took + watchdog.pause_after(took)
    assert cycle == pytest.approx(max(watchdog.INTERVAL_S, (1 + watchdog.PAUSE_FACTOR) * took))


@pytest.mark.parametrize("took", [0.01, 1.0, 2.0, 2.6, 3.0, 4.0, 4.3])
def test_a_stranded_conversation_is_enqueued_within_the_promise(took: float) -> None:
    assert _worst_wait(took) <= watchdog.PROMISE_S + 1e-9


@pytest.mark.parametrize("took", [0.01, 2.6, 4.3, 6.0, 30.0])
def test_the_watchdog_never_takes_more_than_half_a_core(took: float) -> None:
    assert watchdog.pause_after(took) >= took


def test_a_look_of_2_6_s_no_longer_misses_the_promise() -> None:
    # bench watchdog on the files at 100,000 conversations, load 10: a look of 2.6 s stretched
    # the interval to 13 s, and the worst wait to 17.6 s
    assert watchdog.pause_after(2.6) < watchdog.PAUSE_FACTOR * 2.6
    assert _worst_wait(2.6) == pytest.approx(watchdog.PROMISE_S)
