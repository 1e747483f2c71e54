"""Delivery through real workers while Honcho fails a fifth of its calls, and after the
broker lost every queued hint (Redis and RabbitMQ).

The fleet, the capture threads and the judge are ``fleet_support.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import fleet_support
import pytest
from fleet_support import (
    KEY,
    MIXED_FLEET,
    OWNER,
    assert_each_conversation_complete_in_order_once,
    capture_concurrently,
    conversations,
    fleet,
    flush_broker,
    stored_texts,
    swept,
    wait_delivered,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.store import hint_marks
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.runs import run_event
from memhoncho.upkeep.sweep import sweep

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]

# The fixtures these tests share: Redis and RabbitMQ, and the workers' settings on them.
_amqp_vhost = fleet_support._amqp_vhost
broker_url = fleet_support.broker_url
settings = fleet_support.settings


FAULT_PROBABILITY = 0.072  # each of three kinds: 1 - (1 - 0.072) ** 3 ~ 20% of calls fail
FAULT_SLEEP_S = 1.5  # seconds a timeout fault holds its request: past honcho_timeout_s


def test_a_stand_in_failing_a_fifth_of_calls_loses_and_duplicates_nothing(
    host: Host, config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    names, runs = conversations(20), 50
    deployment = Deployment(config_dir, data_dir)
    for seed, kind in enumerate(("http_500", "http_429", "timeout_after_commit")):
        standin.faults.add(
            kind,
            count=None,
            probability=FAULT_PROBABILITY,
            seed=seed,
            retry_after_s=0.2,
            sleep_s=FAULT_SLEEP_S,
        )
    with fleet(config_dir, data_dir, MIXED_FLEET):
        capture_concurrently(host, names, runs, threads=2, pace_s=0.05)
        wait_delivered(
            standin, deployment, workspace_id, names, runs, redrive=swept(deployment, host)
        )
    fired = {f["kind"]: f["fired"] for f in standin.faults.list()}
    print(f"faults fired={fired} of {standin.request_count()} requests")
    assert all(fired[kind] > 0 for kind in ("http_500", "http_429", "timeout_after_commit")), fired
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, runs)


def test_a_flushed_broker_loses_nothing_the_next_capture_or_the_sweep_redrives_it(
    host: Host,
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    broker_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The flushed hints' marks still say "a hint waits"; past STALE_S the next capture no
    # longer believes them (store/hint_marks.py). A short bound keeps the test short.
    monkeypatch.setattr(hint_marks, "STALE_S", 1.0)
    names, runs = conversations(10), 20
    deployment = Deployment(config_dir, data_dir)
    capture_concurrently(host, names, runs, threads=2)  # no worker yet: the hints wait
    flush_broker(broker_url)
    with fleet(config_dir, data_dir, (("prefork", 2),)):
        time.sleep(2.0)  # the workers have nothing to go on
        assert stored_texts(standin, workspace_id) == {}
        for name in names[:5]:  # the next capture re-drives its conversation's whole backlog
            host.capture(run_event(name, runs, OWNER))
        wait_delivered(standin, deployment, workspace_id, names[:5], runs + 1)
        assert_each_conversation_complete_in_order_once(
            standin, deployment, workspace_id, names[:5], runs + 1
        )
        # Flushed again with deliveries under way; the sweep re-drives what is left.
        standin.faults.add("latency_ms", latency_ms=200, count=None, path_contains="/messages")
        for name in names[5:]:
            host.capture(run_event(name, runs, OWNER))
        flush_broker(broker_url)
        report = sweep(deployment, host.enqueue_delivery)
        assert report.enqueued >= 1
        wait_delivered(standin, deployment, workspace_id, names, runs + 1)
    assert_each_conversation_complete_in_order_once(
        standin, deployment, workspace_id, names, runs + 1
    )
