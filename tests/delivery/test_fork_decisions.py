"""Forks without Honcho: the decision rules (``forks.plan_fork``) and the host's fork record.

Every test that takes ``env`` runs on both stores (the ``store_url`` fixture).
"""

from __future__ import annotations

import time
from typing import Any

import forks_support
import pytest
from forks_support import CHILD, PARENT

from memhoncho import ids
from memhoncho.delivery import forks
from memhoncho.errors import ForkRefused, InvalidId, InvalidInput
from memhoncho.models import ForkRecord, Ledger
from memhoncho.testing import HonchoStandIn

# The fixtures these tests share (forks_support.py): the stores, and a host, deployment and
# write client on the stand-in.
settings = forks_support.settings
env = forks_support.env


def _record(at: int, created_at: float | None = None) -> ForkRecord:
    return ForkRecord(
        parent_id=PARENT, child_id=CHILD, at_entry=at, created_at=created_at or time.time()
    )


def _parent(
    anchors: list[tuple[int, str]] | None = None,
    *,
    pending: tuple[int, ...] = (),
    delivered: int | None = None,
    seen: bool = True,
    ledger: bool = True,
) -> forks.ParentView:
    anchors = anchors or []
    view = Ledger(
        conversation_id=PARENT,
        session_id="s-parent",
        anchors=anchors,
        messages_delivered=len(anchors) if delivered is None else delivered,
    )
    return forks.ParentView(ledger=view if ledger else None, pending_entries=pending, seen=seen)


def _plan(at: int, parent: forks.ParentView, **kw: Any) -> forks.ForkPlan:
    return forks.plan_fork(
        _record(at, kw.pop("created_at", None)),
        parent,
        now=time.time(),
        **{
            "wait_limit_s": 600.0,
            "anchor_window": 1000,
            **kw,
        },
    )


# ---- the decision, without Honcho ------------------------------------------------------


def test_the_plan_clones_at_the_newest_anchor_at_or_before_the_fork_point() -> None:
    plan = _plan(5, _parent([(1, "m1"), (2, "m2"), (5, "m5"), (6, "m6")]))
    assert (plan.outcome, plan.anchor) == ("clone", (5, "m5"))
    plan = _plan(4, _parent([(1, "m1"), (2, "m2"), (5, "m5")]))
    assert (plan.outcome, plan.anchor) == ("clone", (2, "m2"))


def test_the_plan_keeps_the_last_part_of_a_split_entry() -> None:
    plan = _plan(2, _parent([(1, "m1"), (2, "m2a"), (2, "m2b"), (3, "m3")]))
    assert plan.anchor == (2, "m2b")


def test_the_plan_never_clones_past_a_later_input_delivered_before_an_answer() -> None:
    # Inputs 10 and 12 were delivered before the answer 11: cutting at 11 would carry 12.
    parent = _parent([(10, "u10"), (12, "u12"), (11, "a11")])
    assert _plan(11, parent).anchor == (10, "u10")
    assert _plan(12, parent).anchor == (11, "a11")
    assert _plan(9, parent).outcome == "none-empty"


def test_the_plan_waits_for_undelivered_parent_messages_at_or_before_the_fork_point() -> None:
    plan = _plan(5, _parent([(1, "m1")], pending=(4, 5, 6)))
    assert plan.outcome is None and "2 parent messages" in plan.reason
    # Pending messages after the fork point do not matter.
    assert _plan(5, _parent([(1, "m1")], pending=(6, 7))).outcome == "clone"


def test_a_wait_past_the_bound_starts_fresh_and_says_why() -> None:
    plan = _plan(5, _parent(pending=(3,)), created_at=time.time() - 700)
    assert plan.outcome == "none-timeout" and "600 s" in plan.reason


def test_a_parent_without_a_ledger_but_with_records_is_waited_for() -> None:
    assert _plan(5, _parent(pending=(1, 2), ledger=False)).outcome is None


def test_a_parent_memhoncho_never_saw_starts_fresh() -> None:
    plan = _plan(5, _parent(seen=False, ledger=False))
    assert plan.outcome == "none-unknown-parent"


def test_a_parent_with_nothing_delivered_is_never_cloned() -> None:
    assert _plan(5, _parent([])).outcome == "none-empty"
    assert _plan(0, _parent([(3, "m3")])).outcome == "none-empty"


def test_a_trimmed_anchor_window_that_starts_after_the_fork_point_starts_fresh() -> None:
    plan = _plan(2, _parent([(50, "m50"), (51, "m51")], delivered=60), anchor_window=2)
    assert plan.outcome == "none-window" and "oldest kept: 50" in plan.reason
    # A window that is not full has dropped nothing: the parent began after the fork point.
    assert _plan(2, _parent([(50, "m50"), (51, "m51")], delivered=60)).outcome == "none-empty"


# ---- the host's record -------------------------------------------------------------------


def test_forking_writes_one_record_and_calls_nothing(env: dict[str, Any]) -> None:
    env["host"].conversation_forked(PARENT, CHILD, 7)
    store = env["deployment"].store()
    record = store.read_fork(ids.conversation_key(CHILD))
    assert record is not None
    assert (record.parent_id, record.child_id, record.at_entry) == (PARENT, CHILD, 7)
    assert forks.pending_fork_keys(store) == [ids.conversation_key(CHILD)]


def test_forking_makes_no_request_to_honcho(env: dict[str, Any], standin: HonchoStandIn) -> None:
    before = standin.request_count()
    env["host"].conversation_forked(PARENT, CHILD, 7)
    assert standin.request_count() == before


@pytest.mark.parametrize("at_entry", [-1, "3", 2.0, True, None])
def test_a_bad_fork_point_is_refused_and_changes_nothing(
    env: dict[str, Any], at_entry: Any
) -> None:
    with pytest.raises(InvalidInput) as caught:
        env["host"].conversation_forked(PARENT, CHILD, at_entry)
    assert caught.value.code == "ERR_INVALID_INPUT"
    assert forks.pending_fork_keys(env["deployment"].store()) == []


@pytest.mark.parametrize("bad", ["", " padded", "a\x00b", 12])
def test_bad_conversation_ids_are_refused(env: dict[str, Any], bad: Any) -> None:
    with pytest.raises(InvalidId):
        env["host"].conversation_forked(bad, CHILD, 1)
    with pytest.raises(InvalidId):
        env["host"].conversation_forked(PARENT, bad, 1)
    assert forks.pending_fork_keys(env["deployment"].store()) == []


def test_a_second_fork_of_the_same_child_is_refused(env: dict[str, Any]) -> None:
    env["host"].conversation_forked(PARENT, CHILD, 3)
    with pytest.raises(ForkRefused) as caught:
        env["host"].conversation_forked("other", CHILD, 9)
    assert caught.value.code == "ERR_FORK_REFUSED"
    record = env["deployment"].store().read_fork(ids.conversation_key(CHILD))
    assert record is not None and record.parent_id == PARENT


def test_forking_a_child_that_has_a_session_is_refused(env: dict[str, Any]) -> None:
    key = ids.conversation_key(CHILD)
    env["deployment"].store().write_ledger(key, Ledger(conversation_id=CHILD, session_id="s1"))
    with pytest.raises(ForkRefused):
        env["host"].conversation_forked(PARENT, CHILD, 3)
    assert forks.pending_fork_keys(env["deployment"].store()) == []


def test_a_conversation_cannot_fork_itself_or_close_a_cycle(env: dict[str, Any]) -> None:
    with pytest.raises(ForkRefused):
        env["host"].conversation_forked(PARENT, PARENT, 3)
    env["host"].conversation_forked("a", "b", 3)
    env["host"].conversation_forked("b", "c", 4)
    with pytest.raises(ForkRefused):
        env["host"].conversation_forked("c", "a", 5)
