"""Forks in process: resolution against the stand-in, and a resolution interrupted at each
step (the decision rules and the host's record: ``test_fork_decisions.py``).

Every test that takes ``env`` runs on both stores (the ``store_url`` fixture).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import forks_support
import pytest
from forks_support import CHILD, PARENT, deliver_in_process, run, sessions_of_child, texts

from memhoncho import ids
from memhoncho.delivery import forks
from memhoncho.delivery.clone import FORK_CHILD_KEY, INTENT_KEY
from memhoncho.errors import ForkRefused, ForkWaiting, InFlightSettling
from memhoncho.models import Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings

# The fixtures these tests share (forks_support.py): the stores, and a host, deployment and
# write client on the stand-in.
settings = forks_support.settings
env = forks_support.env


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
