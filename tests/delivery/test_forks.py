"""Forks in process: the host's record, the decision rules, and resolution against the stand-in.

Every test that takes ``env`` runs on both stores (the ``store_url`` fixture).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forks_support import deliver_in_process, run, sessions_of_child, texts

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import forks
from memhoncho.delivery.clone import FORK_CHILD_KEY, INTENT_KEY
from memhoncho.deployment import Deployment
from memhoncho.errors import ForkRefused, ForkWaiting, InFlightSettling, InvalidId, InvalidInput
from memhoncho.honcho import adapter
from memhoncho.models import ForkRecord, Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings

PARENT = "chat-parent"
CHILD = "chat-child"


@pytest.fixture
def settings(store_url: str | None) -> dict[str, Any]:
    """The plugin's ``deployment`` runs on both stores (``store_url`` names the database in
    the environment, so a settings file this module writes keeps it)."""
    return {}


@pytest.fixture
def env(
    standin: HonchoStandIn,
    workspace_id: str,
    deployment: Deployment,
    host: Host,  # no API key: capture publishes nothing
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("MEMHONCHO_BASE_URL", standin.url)
    monkeypatch.setenv("MEMHONCHO_WORKSPACE_ID", workspace_id)
    client = adapter.write_client(
        adapter.HonchoTarget(base_url=standin.url, api_key="k", workspace_id=workspace_id)
    )
    yield {"deployment": deployment, "host": host, "client": client, "ws": workspace_id}
    adapter.close_clients()


def _capture(env: dict[str, Any], conversation_id: str, *runs: dict[str, Any]) -> None:
    for item in runs:
        assert env["host"].capture({"conversation_id": conversation_id, **item}).status == (
            "captured"
        )


def _deliver(env: dict[str, Any], conversation_id: str) -> Ledger:
    return deliver_in_process(env["deployment"], env["client"], conversation_id)


def _fork_and_deliver(
    env: dict[str, Any], parent: str, at_entry: int, first_run: dict[str, Any]
) -> Ledger:
    """CHILD forked off ``parent`` at ``at_entry``, its ``first_run`` captured and delivered."""
    env["host"].conversation_forked(parent, CHILD, at_entry)
    _capture(env, CHILD, first_run)
    return _deliver(env, CHILD)


def _assert_fresh(
    standin: HonchoStandIn,
    env: dict[str, Any],
    child: Ledger,
    outcome: str,
    says: str,
    child_texts: list[str],
) -> None:
    """``child`` was not cloned: ``outcome``, a reason that ``says`` why, only its own texts."""
    assert child.fork is not None and child.fork.outcome == outcome
    assert child.fork.reason and says in child.fork.reason
    assert texts(standin, env["ws"], child.session_id) == child_texts


def _ledger(env: dict[str, Any], conversation_id: str) -> Ledger:
    ledger = env["deployment"].store().read_ledger(ids.conversation_key(conversation_id))
    assert ledger is not None
    return ledger


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


# ---- resolution against the stand-in ------------------------------------------------------

PARENT_RUNS = [
    run("r1", [(1, "p-u1")], (2, "p-a2")),
    run("r2", [(3, "p-u3")], (4, "p-a4")),
    run("r3", [(5, "p-u5")], (6, "p-a6")),
]


def test_a_fork_clones_the_parent_at_its_anchor_then_the_child_continues(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    _capture(env, PARENT, *PARENT_RUNS)
    parent = _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 4)
    _capture(env, CHILD, run("c1", [(5, "c-u5")], (6, "c-a6")))
    child = _deliver(env, CHILD)
    assert child.fork is not None and child.fork.outcome == "clone"
    assert child.fork.anchor_entry == 4 and child.fork.parent_session_id == parent.session_id
    assert child.session_id not in (None, parent.session_id)
    assert texts(standin, env["ws"], child.session_id) == [
        "p-u1", "p-a2", "p-u3", "p-a4", "c-u5", "c-a6"
    ]  # fmt: skip
    # The parent is untouched: its messages, and its metadata free of the clone's intent tag.
    assert texts(standin, env["ws"], parent.session_id) == [
        "p-u1", "p-a2", "p-u3", "p-a4", "p-u5", "p-a6"
    ]  # fmt: skip
    meta = {s["id"]: s["metadata"] for s in standin.sessions(env["ws"])}
    assert INTENT_KEY not in meta[parent.session_id]
    assert meta[child.session_id][FORK_CHILD_KEY] == ids.conversation_key(CHILD)
    assert child.clone_intent is None
    assert forks.pending_fork_keys(env["deployment"].store()) == []
    # The clone has the child's members with memhoncho's configs, and anchors of its own.
    user = ids.peer_id("ana@example.com")
    assert standin.peer_config(env["ws"], child.session_id, user) == {
        "observe_me": True,
        "observe_others": False,
    }
    assert [e for e, _ in child.anchors] == [1, 2, 3, 4, 5, 6]
    # A second fork of the now-established child is refused.
    with pytest.raises(ForkRefused):
        env["host"].conversation_forked(PARENT, CHILD, 2)


def test_the_answer_before_input_case_cuts_before_the_later_input(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    # Input 12 arrived while answer 11 was being written: Honcho holds u10, u12, a11.
    _capture(env, PARENT, run("r1", [(10, "u10"), (12, "u12")], (11, "a11")))
    _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 11)
    _capture(env, CHILD, run("c1", [(13, "c-u13")], None))
    child = _deliver(env, CHILD)
    assert child.fork is not None and (child.fork.outcome, child.fork.anchor_entry) == (
        "clone",
        10,
    )
    assert texts(standin, env["ws"], child.session_id) == ["u10", "c-u13"]


def test_a_fork_older_than_the_anchor_window_starts_fresh(
    env: dict[str, Any], standin: HonchoStandIn, config_dir: Path
) -> None:
    (config_dir / "settings").mkdir()
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps({"anchor_window": 10}))
    _capture(
        env, PARENT, *[run(f"r{i}", [(2 * i, f"u{i}")], (2 * i + 1, f"a{i}")) for i in range(8)]
    )
    parent = _deliver(env, PARENT)
    assert len(parent.anchors) == 10 and parent.messages_delivered == 16
    env["host"].conversation_forked(PARENT, CHILD, 3)
    _capture(env, CHILD, run("c1", [(4, "c-u4")], None))
    child = _deliver(env, CHILD)
    assert child.fork is not None and child.fork.outcome == "none-window"
    assert child.session_id == ids.session_id(env["ws"], CHILD)
    assert texts(standin, env["ws"], child.session_id) == ["c-u4"]
    assert sessions_of_child(standin, env["ws"], ids.conversation_key(CHILD)) == []


def test_a_parent_that_delivered_nothing_is_never_cloned(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    _capture(env, PARENT, run("r1", [(5, "late")], None))
    _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 2)
    _capture(env, CHILD, run("c1", [(3, "c-u3")], None))
    sessions_before = len(standin.sessions(env["ws"]))
    child = _deliver(env, CHILD)
    assert child.fork is not None and child.fork.outcome == "none-empty"
    assert standin.request_count("/clone") == 0
    assert len(standin.sessions(env["ws"])) == sessions_before + 1
    assert texts(standin, env["ws"], child.session_id) == ["c-u3"]


def test_a_parent_memhoncho_never_saw_makes_a_fresh_child_that_says_so(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    child = _fork_and_deliver(env, "never-seen", 2, run("c1", [(3, "c-u3")], None))
    _assert_fresh(standin, env, child, "none-unknown-parent", "never saw", ["c-u3"])


def test_a_fork_waits_for_a_parent_still_pending_at_fork_time(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    _capture(env, PARENT, *PARENT_RUNS)  # captured, not delivered: no ledger yet
    env["host"].conversation_forked(PARENT, CHILD, 4)
    _capture(env, CHILD, run("c1", [(5, "c-u5")], None))
    with pytest.raises(ForkWaiting) as caught:
        _deliver(env, CHILD)
    assert caught.value.code == "ERR_FORK_WAITING"
    assert standin.request_count("/clone") == 0
    assert forks.pending_fork_keys(env["deployment"].store()) == [ids.conversation_key(CHILD)]
    _deliver(env, PARENT)
    child = _deliver(env, CHILD)
    assert child.fork is not None and child.fork.outcome == "clone"
    assert texts(standin, env["ws"], child.session_id) == ["p-u1", "p-a2", "p-u3", "p-a4", "c-u5"]


def test_a_parent_that_never_catches_up_gives_a_fresh_child_after_the_bound(
    env: dict[str, Any], standin: HonchoStandIn, config_dir: Path
) -> None:
    write_settings(config_dir, fork_wait_s=0)
    _capture(env, PARENT, *PARENT_RUNS)
    child = _fork_and_deliver(env, PARENT, 4, run("c1", [(5, "c-u5")], None))
    _assert_fresh(standin, env, child, "none-timeout", "undelivered", ["c-u5"])


def test_a_fork_of_an_established_fork_clones_the_fork(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    _capture(env, PARENT, *PARENT_RUNS)
    _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 4)
    _capture(env, CHILD, run("c1", [(5, "c-u5")], (6, "c-a6")), run("c2", [(7, "c-u7")], None))
    _deliver(env, CHILD)
    env["host"].conversation_forked(CHILD, "grandchild", 6)
    _capture(env, "grandchild", run("g1", [(7, "g-u7")], None))
    grandchild = _deliver(env, "grandchild")
    assert grandchild.fork is not None and grandchild.fork.outcome == "clone"
    assert texts(standin, env["ws"], grandchild.session_id) == [
        "p-u1", "p-a2", "p-u3", "p-a4", "c-u5", "c-a6", "g-u7"
    ]  # fmt: skip


def test_a_fork_of_a_fork_not_yet_resolved_resolves_its_parent_first(
    env: dict[str, Any], standin: HonchoStandIn
) -> None:
    _capture(env, PARENT, *PARENT_RUNS)
    _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 4)  # the child never captures anything
    env["host"].conversation_forked(CHILD, "grandchild", 2)
    _capture(env, "grandchild", run("g1", [(3, "g-u3")], None))
    grandchild = _deliver(env, "grandchild")
    child = _ledger(env, CHILD)
    assert child.fork is not None and child.fork.outcome == "clone"
    assert texts(standin, env["ws"], child.session_id) == ["p-u1", "p-a2", "p-u3", "p-a4"]
    assert grandchild.fork is not None and grandchild.fork.outcome == "clone"
    assert texts(standin, env["ws"], grandchild.session_id) == ["p-u1", "p-a2", "g-u3"]
    assert forks.pending_fork_keys(env["deployment"].store()) == []


def test_the_sweep_entry_resolves_pending_forks_and_the_summary_counts_them(
    env: dict[str, Any], standin: HonchoStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_API_KEY", "k")
    _capture(env, PARENT, *PARENT_RUNS[:1])
    env["host"].conversation_forked(PARENT, CHILD, 2)
    env["host"].conversation_forked("unknown", "other-child", 2)
    store = env["deployment"].store()
    results = {r["conversation_key"]: r for r in forks.resolve_pending_forks(env["deployment"])}
    assert results[ids.conversation_key(CHILD)]["status"] == "waiting"
    assert results[ids.conversation_key("other-child")]["outcome"] == "none-unknown-parent"
    summary = forks.fork_summary(store)
    assert summary["pending"] == 1 and summary["decisions"] == {"none-unknown-parent": 1}
    _deliver(env, PARENT)
    results = {r["conversation_key"]: r for r in forks.resolve_pending_forks(env["deployment"])}
    assert results[ids.conversation_key(CHILD)] == {
        "conversation_key": ids.conversation_key(CHILD),
        "status": "resolved",
        "outcome": "clone",
    }
    summary = forks.fork_summary(store)
    assert summary["pending"] == 0
    assert summary["decisions"] == {"none-unknown-parent": 1, "clone": 1}
    assert summary["recent"][0]["child"] == ids.conversation_key(CHILD)
    # The child has a session but no records of its own yet: its Honcho history is the clone.
    child = _ledger(env, CHILD)
    assert texts(standin, env["ws"], child.session_id) == ["p-u1", "p-a2"]


# ---- interrupted at each step, in process ------------------------------------------------

STEPS = [
    "intent-written",
    "parent-tagged",
    "cloning-written",
    "cloned",
    "clone-recorded",
    "clone-tagged",
    "parent-untagged",
    "peers-ensured",
    "decided",
    "record-removed",
]


class _Crash(BaseException):
    """Stands for the process dying at a step: nothing after it runs, no handler catches it."""


@pytest.mark.parametrize("step", STEPS)
def test_a_resolution_cut_off_at_any_step_ends_with_exactly_one_clone(
    env: dict[str, Any], standin: HonchoStandIn, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memhoncho.delivery import clone as fork_clone

    _capture(env, PARENT, *PARENT_RUNS)
    parent = _deliver(env, PARENT)
    env["host"].conversation_forked(PARENT, CHILD, 4)
    _capture(env, CHILD, run("c1", [(5, "c-u5")], None))

    def crash_once(reached: str) -> None:
        if reached == step and not crashed:
            crashed.append(reached)
            raise _Crash(reached)

    crashed: list[str] = []
    monkeypatch.setattr(fork_clone, "STEP_OBSERVERS", [crash_once])
    monkeypatch.setenv("MEMHONCHO_HONCHO_TIMEOUT_S", "0.3")  # a lost clone has settled after it
    monkeypatch.setenv("MEMHONCHO_SEND_SETTLE_S", "0.1")  # and this margin
    with pytest.raises(_Crash):
        _deliver(env, CHILD)
    for _ in range(100):
        try:
            child = _deliver(env, CHILD)
            break
        except InFlightSettling:  # a clone request that may still land: the fence
            time.sleep(0.05)
    else:
        pytest.fail("the fork never resolved")
    monkeypatch.setenv("MEMHONCHO_API_KEY", "k")
    forks.resolve_pending_forks(env["deployment"])  # the sweep: a record left by the crash goes
    assert crashed == [step]
    key = ids.conversation_key(CHILD)
    assert len(sessions_of_child(standin, env["ws"], key)) == 1
    assert len(standin.sessions(env["ws"])) == 2  # the parent and the one clone
    assert texts(standin, env["ws"], child.session_id) == ["p-u1", "p-a2", "p-u3", "p-a4", "c-u5"]
    meta = {s["id"]: s["metadata"] for s in standin.sessions(env["ws"])}
    assert INTENT_KEY not in meta[parent.session_id]
    assert forks.pending_fork_keys(env["deployment"].store()) == []
    assert _ledger(env, CHILD).clone_intent is None
    assert env["deployment"].store().read_clone_marker(ids.conversation_key(PARENT)) is None
