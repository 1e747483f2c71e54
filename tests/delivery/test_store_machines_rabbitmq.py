"""Many machines on RabbitMQ + PostgreSQL, as ``test_store_machines`` runs them on Redis: two
hosts and two worker fleets with their own data directories, sharing only a private RabbitMQ
node and a private PostgreSQL server, each of which is restarted under the stream while pool
children are SIGKILLed. The stand-in's own record and ``memhoncho audit`` are the judges."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_delivery_workers import (
    assert_each_conversation_complete_in_order_once,
    run_audit,
    wait_delivered,
)
from test_store_machines import KEY, KILL_GAP_S, KILLS, fleet, machine

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.store import close_stores, schema
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.postgres import PrivateCluster
from memhoncho.testing.rabbitmq import PrivateNode
from memhoncho.upkeep.sweep import sweep

pytestmark = pytest.mark.slow

SETTLE_TIMEOUT_S = 300.0  # seconds the fleets get to deliver everything
RABBITMQ_RESTART_TURN = 30  # the broker restarts before this turn
POSTGRES_RESTART_TURN = 60  # the database restarts before this turn
POSTGRES_DOWN_S = 2.0  # seconds the database stays down

#: a host that keeps a refused run (the database is down) and captures it again, as a host
#: must; DUPLICATE: the refused attempt had committed after all
HOST_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from memhoncho.capture.host import Host
    from memhoncho.errors import StoreUnavailable
    from memhoncho.testing.runs import run_event
    names = sys.argv[1].split(",")
    refused = 0
    with Host() as host:
        for line in sys.stdin:
            turn = int(line)
            for name in names:
                while True:
                    try:
                        result = host.capture(run_event(name, turn, "ana@example.com"))
                    except StoreUnavailable:
                        refused += 1
                        time.sleep(0.1)
                        continue
                    assert result.status in ("captured", "duplicate"), result
                    break
            print(turn, refused, flush=True)
    """
)


class HostProcess:
    """A host on its own machine, capturing the turns it is told to, one line per turn."""

    def __init__(self, deployment: Deployment, names: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
        env["MEMHONCHO_CONFIG_DIR"] = str(deployment.config_dir)
        env["MEMHONCHO_DATA_DIR"] = str(deployment.data_dir)
        self.refused = 0
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOST_SCRIPT, ",".join(names)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def capture_turn(self, turn: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{turn}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().split()
        assert answer and answer[0] == str(turn), f"host failed at turn {turn}"
        self.refused = int(answer[1])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0


def restart_database(cluster: PrivateCluster) -> None:
    cluster.stop("fast")
    time.sleep(POSTGRES_DOWN_S)
    cluster.start()


@pytest.fixture
def standin() -> Iterator[HonchoStandIn]:
    with HonchoStandIn(api_key=KEY) as running:
        yield running


@pytest.fixture
def engines() -> Iterator[tuple[PrivateNode, PrivateCluster]]:
    cluster = PrivateCluster().init()
    cluster.start()
    try:
        schema.upgrade(cluster.url)
        with PrivateNode() as node:
            yield node, cluster
    finally:
        close_stores()
        cluster.destroy()


@pytest.mark.timeout(600)
def test_two_machines_on_rabbitmq_and_postgres_restarted_deliver_every_turn_once_in_order(
    tmp_path: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    engines: tuple[PrivateNode, PrivateCluster],
) -> None:
    node, cluster = engines
    names = [f"conv-{n:02d}" for n in range(40)]
    runs = 100
    machines = [
        machine(tmp_path, name, standin, workspace_id, node.url, cluster.url) for name in ("a", "b")
    ]
    standin.faults.add("latency_ms", latency_ms=15, count=None, path_contains="/messages")
    kills = 0
    started = time.monotonic()
    with fleet(machines[0]) as fleet_a, fleet(machines[1]) as fleet_b:
        killable = fleet_a + fleet_b
        hosts = [HostProcess(m, names) for m in machines]
        rng = random.Random(20261204)
        next_kill = time.monotonic() + rng.uniform(*KILL_GAP_S)
        restarts: list[threading.Thread] = []
        for turn in range(runs):  # the turns of every conversation alternate between hosts
            # Each engine restarts while the hosts capture and the fleets deliver.
            if turn == RABBITMQ_RESTART_TURN:
                # queued hints survive (durable queues), unacknowledged ones come back
                restarts.append(threading.Thread(target=node.restart))
                restarts[-1].start()
            if turn == POSTGRES_RESTART_TURN:
                # every session cut: captures refused (typed), deliveries retried
                restarts.append(threading.Thread(target=restart_database, args=(cluster,)))
                restarts[-1].start()
            hosts[turn % 2].capture_turn(turn)
            if time.monotonic() >= next_kill and kills < KILLS:
                if rng.choice(killable).kill_child(signal.SIGKILL) is not None:
                    kills += 1
                next_kill = time.monotonic() + rng.uniform(*KILL_GAP_S)
        for restart in restarts:
            restart.join()
        refused = sum(h.refused for h in hosts)
        for host in hosts:
            host.close()
        while kills < KILLS:  # the rest while the fleets still deliver
            time.sleep(rng.uniform(*KILL_GAP_S))
            if rng.choice(killable).kill_child(signal.SIGKILL) is not None:
                kills += 1
        with Host(machines[1].config_dir, machines[1].data_dir) as redriver:
            wait_delivered(
                standin,
                workspace_id,
                names,
                runs,
                timeout_s=SETTLE_TIMEOUT_S,
                redrive=lambda: sweep(machines[1], redriver.enqueue_delivery),
            )
        lost_tasks = sum(w.log_text().count("WorkerLostError") for w in killable)
    print(
        f"kills={kills} mid-task={lost_tasks} refused captures={refused}"
        f" elapsed={time.monotonic() - started:.0f}s"
    )
    assert kills >= KILLS
    assert refused > 0  # the database was down under the stream: captures were refused, typed
    for deployment in machines:  # no outbox, ledger or lock file on either machine
        assert not (deployment.data_dir / "data" / "outbox").exists()
        assert not (deployment.data_dir / "state" / "ledger").exists()
    assert_each_conversation_complete_in_order_once(standin, machines[0], workspace_id, names, runs)
    audited = run_audit(machines[0].config_dir, machines[0].data_dir)
    assert audited.returncode == 0, audited.stdout[-3000:]
