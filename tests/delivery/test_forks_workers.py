"""Forks through real Celery workers over real Redis, against the stand-in: each fork rule,
and a fork waiting for its parent. The SIGKILLs at each step of a fork are in
``test_forks_kills_workers.py`` and ``test_forks_kills_held_workers.py``."""

from __future__ import annotations

from typing import Any

import pytest
from forks_support import run, texts
from forks_workers_support import (
    API_KEY,
    PARENT,
    PARENT_RUNS,
    PARENT_TEXTS,
    capture,
    fork_settings,
    wait_delivered,
    wait_for,
    worker,
)

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import forks
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=API_KEY)]


@pytest.fixture
def settings(standin_settings: SettingsWriter, redis_url: str) -> dict[str, Any]:
    return fork_settings(standin_settings, redis_url)


def test_each_fork_rule_holds_through_a_real_worker(
    deployment: Deployment, host: Host, standin: HonchoStandIn, workspace_id: str
) -> None:
    ws = workspace_id
    with worker(deployment, standin, concurrency=2) as process:
        capture(host, PARENT, *PARENT_RUNS)
        # Input 12 arrived while answer 11 was written: Honcho holds u10, u12, a11.
        capture(host, "wk-abi", run("q1", [(10, "u10"), (12, "u12")], (11, "a11")))
        capture(host, "wk-long", *[run(f"w{i}", [(2 * i, f"w{i}")], None) for i in range(12)])
        capture(host, "wk-late", run("l1", [(5, "late-u5")], None))
        wait_delivered(deployment, process, PARENT, "wk-abi", "wk-long", "wk-late")

        host.conversation_forked(PARENT, "wk-clone", 4)
        host.conversation_forked("wk-abi", "wk-abi-kid", 11)
        host.conversation_forked("wk-long", "wk-window", 3)
        host.conversation_forked("wk-late", "wk-empty", 2)
        host.conversation_forked("wk-nobody", "wk-orphan", 2)
        for child in ("wk-clone", "wk-abi-kid", "wk-window", "wk-empty", "wk-orphan"):
            capture(host, child, run("k1", [(50, f"{child}-own")], (51, f"{child}-answer")))
        found = {
            c: wait_delivered(deployment, process, c)
            for c in ("wk-clone", "wk-abi-kid", "wk-window", "wk-empty", "wk-orphan")
        }
        # A fork of the fork, at an entry of the fork's own.
        host.conversation_forked("wk-clone", "wk-grandkid", 50)
        capture(host, "wk-grandkid", run("g1", [(60, "g-own")], None))
        found["wk-grandkid"] = wait_delivered(deployment, process, "wk-grandkid")

    def outcome(child: str) -> str:
        decision = found[child].fork
        assert decision is not None
        return decision.outcome

    def own(child: str) -> list[str]:
        return [f"{child}-own", f"{child}-answer"]

    assert outcome("wk-clone") == "clone"
    assert texts(standin, ws, found["wk-clone"].session_id) == PARENT_TEXTS[:4] + own("wk-clone")
    assert outcome("wk-abi-kid") == "clone"
    assert texts(standin, ws, found["wk-abi-kid"].session_id) == ["u10"] + own("wk-abi-kid")
    assert outcome("wk-window") == "none-window"
    assert texts(standin, ws, found["wk-window"].session_id) == own("wk-window")
    assert outcome("wk-empty") == "none-empty"
    assert texts(standin, ws, found["wk-empty"].session_id) == own("wk-empty")
    assert outcome("wk-orphan") == "none-unknown-parent"
    assert texts(standin, ws, found["wk-orphan"].session_id) == own("wk-orphan")
    assert outcome("wk-grandkid") == "clone"
    assert texts(standin, ws, found["wk-grandkid"].session_id) == (
        PARENT_TEXTS[:4] + ["wk-clone-own", "g-own"]
    )
    # Only the three clones were made, and never of an empty session.
    assert standin.request_count("/clone") == 3
    assert forks.pending_fork_keys(deployment.store()) == []
    summary = forks.fork_summary(deployment.store())
    assert summary["decisions"] == {
        "clone": 3,
        "none-window": 1,
        "none-empty": 1,
        "none-unknown-parent": 1,
    }


def test_a_fork_made_while_its_parent_is_still_pending_waits_for_it(
    deployment: Deployment, host: Host, standin: HonchoStandIn, workspace_id: str
) -> None:
    parent_sid = ids.session_id(workspace_id, PARENT)
    # The parent's sends fail until the child has been seen waiting for them.
    standin.faults.add(
        "http_503", count=None, method="POST", path_contains=f"{parent_sid}/messages"
    )
    with worker(deployment, standin, concurrency=2) as process:
        capture(host, PARENT, *PARENT_RUNS)
        host.conversation_forked(PARENT, "wk-waiting", 4)
        capture(host, "wk-waiting", run("k1", [(7, "kid-own")], None))
        wait_for(lambda: _last_error_is(deployment, "wk-waiting", "ERR_FORK_WAITING"), process)
        assert standin.request_count("/clone") == 0
        standin.faults.clear()
        child = wait_delivered(deployment, process, "wk-waiting")
        wait_delivered(deployment, process, PARENT)
    assert child.fork is not None and child.fork.outcome == "clone"
    assert texts(standin, workspace_id, child.session_id) == PARENT_TEXTS[:4] + ["kid-own"]


def _last_error_is(deployment: Deployment, conversation_id: str, code: str) -> Ledger | None:
    ledger = read_ledger(deployment.layout, ids.conversation_key(conversation_id))
    if ledger is not None and (ledger.last_error or {}).get("code") == code:
        return ledger
    return None
