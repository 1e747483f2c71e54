"""Coalesced hints under real concurrency: captures from two processes while deliveries run and
pool children are SIGKILLed. No sweep and no relay re-drive here: every record must reach the
stand-in through the hints the captures published (or the one already waiting), exactly once,
in order, and the captures publish fewer hints than they make records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fleet_support
import pytest
from fleet_support import (  # the same fleet, fixtures, capture and judging helpers
    KILLABLE_FLEET,
    OWNER,
    KillPlan,
    assert_each_conversation_complete_in_order_once,
    capture_under_kills,
    conversations,
    fleet,
    wait_delivered,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.testing import HonchoStandIn

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=fleet_support.KEY)]

# The worker tests' settings on the test Redis (the stand-in and the Host come from the plugin).
settings = fleet_support.settings


@pytest.fixture
def broker_url(redis_url: str) -> str:
    """Redis only: the worker tests run on both brokers; this one measures the file marks."""
    return redis_url


RUNS = 60
KILLS = 40  # SIGKILLs of pool children, at random moments
KILL_GAP_S = (0.02, 0.3)  # seconds between kills
PACE_S = 0.02  # seconds between a capturing thread's rounds: captures overlap deliveries

OTHER_PROCESS = """
import json, sys, time
from memhoncho.capture.host import Host
from memhoncho.testing.runs import run_event
config, data, names, runs, owner, pace = json.loads(sys.argv[1])
with Host(config, data) as host:
    for i in range(runs):
        for name in names:
            host.capture(run_event(name, i, owner))
        time.sleep(pace)
    print(json.dumps({"hints": host.hints_published}))
"""


def test_coalesced_hints_from_two_processes_under_worker_kills_lose_and_duplicate_nothing(
    host: Host, config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    names = conversations(12)
    ours, theirs = names[:8], names[8:]
    deployment = Deployment(config_dir, data_dir)
    standin.faults.add("latency_ms", latency_ms=20, count=None, path_contains="/messages")
    with fleet(config_dir, data_dir, KILLABLE_FLEET) as workers:
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESS]
            + [json.dumps([str(config_dir), str(data_dir), theirs, RUNS, OWNER, PACE_S])],
            stdout=subprocess.PIPE,
            text=True,
        )
        kills = capture_under_kills(
            host,
            workers,
            ours,
            RUNS,
            KillPlan(pace_s=PACE_S, seed=15, gap_s=KILL_GAP_S, threads=4),
            go_on=lambda kills, capturing: (
                kills < KILLS and (capturing.is_alive() or other.poll() is None)
            ),
        )
        out, _ = other.communicate(timeout=120)
        assert other.returncode == 0
        wait_delivered(standin, deployment, workspace_id, names, RUNS)  # no re-drive: hints alone
    their_hints = json.loads(out.strip().splitlines()[-1])["hints"]
    records = len(names) * RUNS
    hints = host.hints_published + their_hints
    print(f"kills={kills} records={records} hints={hints}")
    assert kills >= 10
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, RUNS)
    assert hints < records  # coalesced: a waiting hint covered some captures
