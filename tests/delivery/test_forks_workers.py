"""Forks through real Celery workers over real Redis, against the stand-in; real SIGKILLs."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fork_kill_hook import PLAN_ENV
from forks_support import run, sessions_of_child, texts

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery import forks
from memhoncho.delivery.clone import FORK_CHILD_KEY, FORK_TAG_KEY, INTENT_KEY
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.store.forks import clone_marker_path
from memhoncho.store.ledger import read_ledger
from memhoncho.store.outbox import Outbox
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.worker import routing

API_KEY = "fork-test-key"
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=API_KEY)]

TESTS_DIR = Path(__file__).resolve().parent
HONCHO_TIMEOUT_S = 1.0  # seconds: the workers' client timeout, so a lost clone settles soon
SEND_SETTLE_S = 0.5  # seconds: the fence's settle margin, short for the same reason
HELD_S = 0.6  # seconds a latency fault holds the request a worker is killed inside
KILL_AFTER_S = 0.15  # seconds into that request the worker is killed
WAIT_S = 90.0  # seconds a conversation may take to be delivered before the test gives up
REDRIVE_S = 10.0  # seconds without progress before the test re-drives, as the sweep does
KILL_ROUNDS = 4  # rounds over every kill point: 16 points x 4 = 64 killed resolutions

PARENT = "wk-parent"
PARENT_RUNS = [
    run("r1", [(1, "p-u1")], (2, "p-a2")),
    run("r2", [(3, "p-u3")], (4, "p-a4")),
    run("r3", [(5, "p-u5")], (6, "p-a6")),
]
PARENT_TEXTS = ["p-u1", "p-a2", "p-u3", "p-a4", "p-u5", "p-a6"]


@pytest.fixture
def settings(standin_settings: SettingsWriter, redis_url: str) -> dict[str, Any]:
    return standin_settings(
        broker_url=redis_url,
        honcho_timeout_s=HONCHO_TIMEOUT_S,
        anchor_window=10,
        send_settle_s=SEND_SETTLE_S,
    )


def _worker(deployment: Deployment, standin: HonchoStandIn, **options: Any) -> CeleryProcess:
    extra = {"PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    extra.update(options.pop("env", {}))
    env = memhoncho_env(
        config_dir=deployment.config_dir,
        data_dir=deployment.data_dir,
        api_key=None,
        base_url=standin.url,
        extra=extra,
    )
    queues = routing.deliver_queues(deployment.settings().partitions)
    return CeleryProcess("worker", env, queues=queues, **options)


def _capture(host: Host, conversation_id: str, *runs: dict[str, Any]) -> None:
    for item in runs:
        result = host.capture({"conversation_id": conversation_id, **item})
        assert result.status == "captured" and result.enqueued


def _delivered(deployment: Deployment, conversation_id: str) -> Ledger | None:
    """The ledger once everything captured is in Honcho; None before."""
    key = ids.conversation_key(conversation_id)
    ledger = read_ledger(deployment.layout, key)
    if ledger is None or ledger.session_id is None or ledger.in_flight:
        return None
    return None if Outbox(deployment.layout).pending(key, ledger.delivered_seq) else ledger


def _wait_for(
    what: Callable[[], Ledger | None],
    worker: CeleryProcess,
    redrive: Callable[[], object] | None = None,
) -> Ledger:
    """Poll ``what``; every ``REDRIVE_S`` call ``redrive``, as the sweep would re-drive a hint."""
    deadline = time.monotonic() + WAIT_S
    next_redrive = time.monotonic() + REDRIVE_S
    while time.monotonic() < deadline:
        found = what()
        if found is not None:
            return found
        if redrive is not None and time.monotonic() >= next_redrive:
            redrive()
            next_redrive = time.monotonic() + REDRIVE_S
        time.sleep(0.05)
    pytest.fail(f"not delivered in {WAIT_S} s; worker log:\n{worker.log_text()[-4000:]}")


def _wait_delivered(
    deployment: Deployment, worker: CeleryProcess, *conversation_ids: str
) -> Ledger:
    ledger = None
    for conversation_id in conversation_ids:
        ledger = _wait_for(lambda c=conversation_id: _delivered(deployment, c), worker)
    assert ledger is not None
    return ledger


def test_each_fork_rule_holds_through_a_real_worker(
    deployment: Deployment, host: Host, standin: HonchoStandIn, workspace_id: str
) -> None:
    ws = workspace_id
    with _worker(deployment, standin, concurrency=2) as worker:
        _capture(host, PARENT, *PARENT_RUNS)
        # Input 12 arrived while answer 11 was written: Honcho holds u10, u12, a11.
        _capture(host, "wk-abi", run("q1", [(10, "u10"), (12, "u12")], (11, "a11")))
        _capture(host, "wk-long", *[run(f"w{i}", [(2 * i, f"w{i}")], None) for i in range(12)])
        _capture(host, "wk-late", run("l1", [(5, "late-u5")], None))
        _wait_delivered(deployment, worker, PARENT, "wk-abi", "wk-long", "wk-late")

        host.conversation_forked(PARENT, "wk-clone", 4)
        host.conversation_forked("wk-abi", "wk-abi-kid", 11)
        host.conversation_forked("wk-long", "wk-window", 3)
        host.conversation_forked("wk-late", "wk-empty", 2)
        host.conversation_forked("wk-nobody", "wk-orphan", 2)
        for child in ("wk-clone", "wk-abi-kid", "wk-window", "wk-empty", "wk-orphan"):
            _capture(host, child, run("k1", [(50, f"{child}-own")], (51, f"{child}-answer")))
        found = {
            c: _wait_delivered(deployment, worker, c)
            for c in ("wk-clone", "wk-abi-kid", "wk-window", "wk-empty", "wk-orphan")
        }
        # A fork of the fork, at an entry of the fork's own.
        host.conversation_forked("wk-clone", "wk-grandkid", 50)
        _capture(host, "wk-grandkid", run("g1", [(60, "g-own")], None))
        found["wk-grandkid"] = _wait_delivered(deployment, worker, "wk-grandkid")

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
    with _worker(deployment, standin, concurrency=2) as worker:
        _capture(host, PARENT, *PARENT_RUNS)
        host.conversation_forked(PARENT, "wk-waiting", 4)
        _capture(host, "wk-waiting", run("k1", [(7, "kid-own")], None))
        _wait_for(lambda: _last_error_is(deployment, "wk-waiting", "ERR_FORK_WAITING"), worker)
        assert standin.request_count("/clone") == 0
        standin.faults.clear()
        child = _wait_delivered(deployment, worker, "wk-waiting")
        _wait_delivered(deployment, worker, PARENT)
    assert child.fork is not None and child.fork.outcome == "clone"
    assert texts(standin, workspace_id, child.session_id) == PARENT_TEXTS[:4] + ["kid-own"]


def _last_error_is(deployment: Deployment, conversation_id: str, code: str) -> Ledger | None:
    ledger = read_ledger(deployment.layout, ids.conversation_key(conversation_id))
    if ledger is not None and (ledger.last_error or {}).get("code") == code:
        return ledger
    return None


#: (step a pool process is killed at, the latency fault holding the next request, or None)
KILL_POINTS: list[tuple[str, dict[str, Any] | None]] = [
    ("intent-written", None),
    ("parent-tagged", None),
    ("cloning-written", None),
    ("cloned", None),
    ("clone-recorded", None),
    ("clone-tagged", None),
    ("parent-untagged", None),
    ("peers-ensured", None),
    ("decided", None),
    ("record-removed", None),
    ("intent-written", {"method": "PUT", "path_contains": "/sessions/"}),  # tagging the parent
    ("cloning-written", {"method": "POST", "path_contains": "/clone"}),  # the clone itself
    ("clone-recorded", {"method": "PUT", "path_contains": "/sessions/"}),  # tagging the clone
    ("clone-tagged", {"method": "PUT", "path_contains": "/sessions/"}),  # untagging the parent
    ("parent-untagged", {"method": "PUT", "path_contains": "/config"}),  # the child's peers
    ("peers-ensured", {"method": "POST", "path_contains": "/messages/list"}),  # its anchors
]


def test_a_worker_killed_at_each_step_of_a_fork_leaves_one_session_per_child(
    deployment: Deployment,
    host: Host,
    standin: HonchoStandIn,
    workspace_id: str,
    tmp_path: Path,
) -> None:
    plan = tmp_path / "kill-plan.json"
    rng = random.Random(4)
    children: dict[str, int] = {}
    with _worker(
        deployment, standin, env={PLAN_ENV: str(plan)}, extra_args=["-I", "fork_kill_hook"]
    ) as worker:
        _capture(host, PARENT, *PARENT_RUNS)
        _wait_delivered(deployment, worker, PARENT)
        for round_number in range(KILL_ROUNDS):
            for index, (step, fault) in enumerate(KILL_POINTS):
                child = f"wk-kid-{round_number}-{index}"
                at = rng.randint(1, 6)
                spec: dict[str, Any] = {"step": step}
                if fault is not None:
                    spec.update(delay_s=KILL_AFTER_S, fault={**fault, "latency_ms": HELD_S * 1000})
                plan.write_text(json.dumps(spec))
                host.conversation_forked(PARENT, child, at)
                _capture(host, child, run("k1", [(7, f"{child}-own")], None))
                # A killed task's message is requeued, but a lost hint is possible too (the
                # broker carries hints): the sweep's re-drive covers it.
                ledger = _wait_for(
                    lambda c=child: _delivered(deployment, c),
                    worker,
                    redrive=lambda c=child: host.enqueue_delivery(c),
                )
                assert not plan.exists(), f"no worker was killed at {step} for {child}"
                children[child] = at
                key = ids.conversation_key(child)
                assert sessions_of_child(standin, workspace_id, key) == [ledger.session_id]
                assert texts(standin, workspace_id, ledger.session_id) == (
                    PARENT_TEXTS[:at] + [f"{child}-own"]
                )
    # Exactly one session per child and nothing else: no stray clone anywhere (a stray is
    # named by the child whose tag it carries, and its message count).
    sessions = standin.sessions(workspace_id)
    known = {ids.session_id(workspace_id, PARENT)} | {
        _ledger_session(deployment, c) for c in children
    }
    owner_of_tag = {
        s["metadata"].get(FORK_TAG_KEY): s["metadata"].get(FORK_CHILD_KEY) for s in sessions
    }
    stray = [
        (owner_of_tag.get(s["metadata"].get(INTENT_KEY)), len(s["messages"]))
        for s in sessions
        if s["id"] not in known
    ]
    assert stray == []
    assert len(sessions) == 1 + len(children)
    assert len(children) >= 50
    assert not clone_marker_path(deployment.layout, ids.conversation_key(PARENT)).exists()
    forks.resolve_pending_forks(deployment)  # the sweep clears records a kill left behind
    assert forks.pending_fork_keys(deployment.store()) == []


def _ledger_session(deployment: Deployment, conversation_id: str) -> str | None:
    ledger = read_ledger(deployment.layout, ids.conversation_key(conversation_id))
    return ledger.session_id if ledger else None
