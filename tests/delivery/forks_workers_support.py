"""Helpers of the fork tests through real Celery workers (``test_forks*_workers.py``): the
settings, a worker with the kill hook on its path, waits on delivery, and the kill scenario,
which two files run on halves of the kill points so they go to two test processes."""

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
TESTS_DIR = Path(__file__).resolve().parent
HONCHO_TIMEOUT_S = 1.0  # seconds: the workers' client timeout, so a lost clone settles soon
#: seconds: the fence's settle margin, long enough for a stand-in starved of CPU in this loaded
#: process to commit what a killed worker sent (as in fleet_support.settings)
SEND_SETTLE_S = 4.0
HELD_S = 0.6  # seconds a latency fault holds the request a worker is killed inside
KILL_AFTER_S = 0.15  # seconds into that request the worker is killed
WAIT_S = 90.0  # seconds a conversation may take to be delivered before the test gives up
REDRIVE_S = 10.0  # seconds without progress before the test re-drives, as the sweep does
KILL_ROUNDS = 4  # rounds over every kill point of a file

PARENT = "wk-parent"
PARENT_RUNS = [
    run("r1", [(1, "p-u1")], (2, "p-a2")),
    run("r2", [(3, "p-u3")], (4, "p-a4")),
    run("r3", [(5, "p-u5")], (6, "p-a6")),
]
PARENT_TEXTS = ["p-u1", "p-a2", "p-u3", "p-a4", "p-u5", "p-a6"]

#: (step a pool process is killed at, the latency fault holding the next request, or None)
KillPoint = tuple[str, dict[str, Any] | None]


def fork_settings(standin_settings: SettingsWriter, redis_url: str) -> dict[str, Any]:
    return standin_settings(
        broker_url=redis_url,
        honcho_timeout_s=HONCHO_TIMEOUT_S,
        anchor_window=10,
        send_settle_s=SEND_SETTLE_S,
    )


def worker(deployment: Deployment, standin: HonchoStandIn, **options: Any) -> CeleryProcess:
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


def capture(host: Host, conversation_id: str, *runs: dict[str, Any]) -> None:
    for item in runs:
        result = host.capture({"conversation_id": conversation_id, **item})
        assert result.status == "captured" and result.enqueued


def delivered(deployment: Deployment, conversation_id: str) -> Ledger | None:
    """The ledger once everything captured is in Honcho; None before."""
    key = ids.conversation_key(conversation_id)
    ledger = read_ledger(deployment.layout, key)
    if ledger is None or ledger.session_id is None or ledger.in_flight:
        return None
    return None if Outbox(deployment.layout).pending(key, ledger.delivered_seq) else ledger


def wait_for(
    what: Callable[[], Ledger | None],
    process: CeleryProcess,
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
    pytest.fail(f"not delivered in {WAIT_S} s; worker log:\n{process.log_text()[-4000:]}")


def wait_delivered(
    deployment: Deployment, process: CeleryProcess, *conversation_ids: str
) -> Ledger:
    ledger = None
    for conversation_id in conversation_ids:
        ledger = wait_for(lambda c=conversation_id: delivered(deployment, c), process)
    assert ledger is not None
    return ledger


def kill_at_each_point(
    deployment: Deployment,
    host: Host,
    standin: HonchoStandIn,
    workspace_id: str,
    plan: Path,
    points: list[KillPoint],
) -> None:
    """``KILL_ROUNDS`` rounds over ``points``: each a new child forked off the parent at a
    random entry, its resolution's pool process SIGKILLed at the point; each child ends with
    exactly one session holding the parent's prefix and its own message, and no stray clone."""
    rng = random.Random(4)
    children: dict[str, int] = {}
    with worker(
        deployment, standin, env={PLAN_ENV: str(plan)}, extra_args=["-I", "fork_kill_hook"]
    ) as process:
        capture(host, PARENT, *PARENT_RUNS)
        wait_delivered(deployment, process, PARENT)
        for round_number in range(KILL_ROUNDS):
            for index, (step, fault) in enumerate(points):
                child = f"wk-kid-{round_number}-{index}"
                at = rng.randint(1, 6)
                spec: dict[str, Any] = {"step": step}
                if fault is not None:
                    spec.update(delay_s=KILL_AFTER_S, fault={**fault, "latency_ms": HELD_S * 1000})
                plan.write_text(json.dumps(spec))
                host.conversation_forked(PARENT, child, at)
                capture(host, child, run("k1", [(7, f"{child}-own")], None))
                # A killed task's message is requeued, but a lost hint is possible too (the
                # broker carries hints): the sweep's re-drive covers it.
                ledger = wait_for(
                    lambda c=child: delivered(deployment, c),
                    process,
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
    assert len(children) == KILL_ROUNDS * len(points)
    assert not clone_marker_path(deployment.layout, ids.conversation_key(PARENT)).exists()
    forks.resolve_pending_forks(deployment)  # the sweep clears records a kill left behind
    assert forks.pending_fork_keys(deployment.store()) == []


def _ledger_session(deployment: Deployment, conversation_id: str) -> str | None:
    ledger = read_ledger(deployment.layout, ids.conversation_key(conversation_id))
    return ledger.session_id if ledger else None
