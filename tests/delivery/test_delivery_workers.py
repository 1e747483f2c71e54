"""Delivery through real ``celery worker`` processes over real Redis and RabbitMQ to the
stand-in: fifty conversations at once, and pool children SIGKILLed at random moments.

The fleet, the capture threads and the judge are ``fleet_support.py``.
"""

from __future__ import annotations

from pathlib import Path

import fleet_support
import pytest
from fleet_support import (
    KEY,
    KILLABLE_FLEET,
    MIXED_FLEET,
    KillPlan,
    SweepRedrive,
    assert_each_conversation_complete_in_order_once,
    capture_concurrently,
    capture_under_kills,
    conversations,
    fleet,
    wait_delivered,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.testing import HonchoStandIn

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]

# The fixtures these tests share: Redis and RabbitMQ, and the workers' settings on them.
_amqp_vhost = fleet_support._amqp_vhost
broker_url = fleet_support.broker_url
settings = fleet_support.settings


def test_fifty_conversations_of_two_hundred_runs_arrive_complete_in_order_once(
    host: Host, config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    names, runs = conversations(50), 200
    deployment = Deployment(config_dir, data_dir)
    with fleet(config_dir, data_dir, MIXED_FLEET):
        capture_concurrently(host, names, runs)
        wait_delivered(standin, deployment, workspace_id, names, runs)
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, runs)
    # Coalesced: far fewer sends than runs.
    sends = standin.request_count(path_contains="/messages", method="POST")
    assert sends < len(names) * runs / 2


KILLS = 100  # SIGKILLs of pool children, at random moments
KILL_GAP_S = (0.02, 0.25)  # seconds between kills, uniformly drawn
SEND_LATENCY_MS = 20  # added to each send, so kills often land mid-send


def test_pool_children_killed_at_random_moments_lose_duplicate_and_reorder_nothing(
    host: Host, config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    names, runs = conversations(20), 80
    deployment = Deployment(config_dir, data_dir)
    standin.faults.add(
        "latency_ms", latency_ms=SEND_LATENCY_MS, count=None, path_contains="/messages"
    )
    redrive = SweepRedrive(deployment, host)
    with fleet(config_dir, data_dir, KILLABLE_FLEET) as workers:
        plan = KillPlan(pace_s=0.2, seed=20261203, gap_s=KILL_GAP_S)
        kills = capture_under_kills(
            host, workers, names, runs, plan, go_on=lambda kills, _: kills < KILLS
        )
        wait_delivered(standin, deployment, workspace_id, names, runs, redrive=redrive)
        mid_task = sum(w.log_text().count("WorkerLostError") for w in workers)
    print(f"kills={kills} mid-task={mid_task} sweep re-drives={len(redrive.times)}")
    assert kills >= KILLS
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, runs)
