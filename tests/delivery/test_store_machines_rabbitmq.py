"""Many machines on RabbitMQ + PostgreSQL, as ``test_store_machines`` runs them on Redis: two
hosts and two worker fleets with their own data directories, sharing only a private RabbitMQ
node and a private PostgreSQL server, each of which is restarted under the stream while pool
children are SIGKILLed. The stand-in's own record and ``memhoncho audit`` are the judges."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import assert_each_conversation_complete_in_order_once, run_audit
from test_store_machines import (
    KEY,
    KILLS,
    HostProcess,
    Killer,
    assert_no_local_state,
    fleet,
    machine,
    settle,
)

from memhoncho.capture.host import Host
from memhoncho.store import close_stores, schema
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.postgres import PrivateCluster
from memhoncho.testing.rabbitmq import PrivateNode

pytestmark = pytest.mark.slow

RABBITMQ_RESTART_TURN = 30  # the broker restarts before this turn
POSTGRES_RESTART_TURN = 60  # the database restarts before this turn
POSTGRES_DOWN_S = 2.0  # seconds the database stays down

#: a host that keeps a refused run (the database is down) and captures it again, as a host
#: must; DUPLICATE: the refused attempt had committed after all
REFUSING_HOST_SCRIPT = textwrap.dedent(
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
    started = time.monotonic()
    with fleet(machines[0]) as fleet_a, fleet(machines[1]) as fleet_b:
        killer = Killer(fleet_a + fleet_b, seed=20261204)
        hosts = [HostProcess(m, names, REFUSING_HOST_SCRIPT) for m in machines]
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
            killer.maybe_kill()
        for restart in restarts:
            restart.join()
        refused = sum(h.refused for h in hosts)
        for host in hosts:
            host.close()
        killer.kill_the_rest()
        with Host(machines[1].config_dir, machines[1].data_dir) as redriver:
            settle(standin, workspace_id, names, runs, machines[1], redriver)
        lost_tasks = sum(w.log_text().count("WorkerLostError") for w in killer.killable)
    print(
        f"kills={killer.kills} mid-task={lost_tasks} refused captures={refused}"
        f" elapsed={time.monotonic() - started:.0f}s"
    )
    assert killer.kills >= KILLS
    assert refused > 0  # the database was down under the stream: captures were refused, typed
    assert_no_local_state(machines)
    assert_each_conversation_complete_in_order_once(standin, machines[0], workspace_id, names, runs)
    audited = run_audit(machines[0].config_dir, machines[0].data_dir)
    assert audited.returncode == 0, audited.stdout[-3000:]
