"""Many machines on the PostgreSQL store, with real processes: two hosts and two worker fleets,
each machine with its own data directory (nothing shared but PostgreSQL and Redis), and a
database restarted under a capture stream. The stand-in's own record is the judge."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_support import (  # the worker tests' waiting and judging, on the database
    assert_each_conversation_complete_in_order_once,
    swept,
    wait_delivered,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, initialise
from memhoncho.errors import StoreUnavailable
from memhoncho.models import CaptureStatus
from memhoncho.store import close_stores
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.postgres import PrivateCluster
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, running
from memhoncho.testing.runs import run_event

KEY = "sk-machines-key"
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]

OWNER = "ana@example.com"
FLEET = (("prefork", 2), ("prefork", 1))  # one machine's workers
SETTLE_TIMEOUT_S = 300.0  # seconds the fleets get to deliver everything
KILLS = 24  # SIGKILLs of pool children across both fleets
KILL_GAP_S = (0.1, 0.5)  # seconds between kills
DOWN_S = 4.0  # seconds the database stays down under the capture stream


def machine(
    root: Path, name: str, standin: HonchoStandIn, workspace_id: str, redis: str, store: str
) -> Deployment:
    """One machine's config and data directories; only the database and the broker shared."""
    config_dir, data_dir = root / name / "config", root / name / "data"
    write_settings(
        config_dir,
        base_url=standin.url,
        workspace_id=workspace_id,
        broker_url=redis,
        store_url=store,
        honcho_timeout_s=1.0,
        store_timeout_s=1.0,
    )
    write_api_key(config_dir, KEY)
    initialise(data_dir)  # as `memhoncho init` on each machine: its workers refuse a new folder
    return Deployment(config_dir, data_dir)


@contextlib.contextmanager
def fleet(deployment: Deployment) -> Iterator[list[CeleryProcess]]:
    env = memhoncho_env(
        config_dir=deployment.config_dir, data_dir=deployment.data_dir, api_key=None
    )
    workers = [CeleryProcess("worker", env, pool=p, concurrency=c) for p, c in FLEET]
    with running(workers):
        yield workers


HOST_SCRIPT = textwrap.dedent(
    """
    import sys
    from memhoncho.capture.host import Host
    from memhoncho.testing.runs import run_event
    names = sys.argv[1].split(",")
    with Host() as host:
        for line in sys.stdin:
            turn = int(line)
            for name in names:
                result = host.capture(run_event(name, turn, "ana@example.com"))
                assert result.status == "captured", result
            print(turn, flush=True)
    """
)


class HostProcess:
    """A host on its own machine, capturing the turns it is told to, one line per turn. The
    script answers each turn with the turn, then (if it counts them) the captures refused."""

    def __init__(self, deployment: Deployment, names: list[str], script: str = HOST_SCRIPT) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
        env["MEMHONCHO_CONFIG_DIR"] = str(deployment.config_dir)
        env["MEMHONCHO_DATA_DIR"] = str(deployment.data_dir)
        self.refused = 0
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, ",".join(names)],
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
        if len(answer) > 1:
            self.refused = int(answer[1])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0


class Killer:
    """SIGKILLs a random pool child of the fleets at random gaps, KILLS of them in all."""

    def __init__(self, killable: list[CeleryProcess], seed: int) -> None:
        self.killable = killable
        self.rng = random.Random(seed)
        self.kills = 0
        self.next_kill = time.monotonic() + self.rng.uniform(*KILL_GAP_S)

    def _kill(self) -> None:
        if self.rng.choice(self.killable).kill_child(signal.SIGKILL) is not None:
            self.kills += 1

    def maybe_kill(self) -> None:
        """One kill, if the gap has passed (called between captures)."""
        if time.monotonic() >= self.next_kill and self.kills < KILLS:
            self._kill()
            self.next_kill = time.monotonic() + self.rng.uniform(*KILL_GAP_S)

    def kill_the_rest(self) -> None:
        """The kills still due, while the fleets deliver."""
        while self.kills < KILLS:
            time.sleep(self.rng.uniform(*KILL_GAP_S))
            self._kill()


def settle(
    standin: HonchoStandIn,
    workspace_id: str,
    names: list[str],
    runs: int,
    deployment: Deployment,
    host: Host,
) -> None:
    """Wait until every run is delivered, sweeping ``deployment`` into ``host``'s queue."""
    wait_delivered(
        standin, deployment, workspace_id, names, runs, SETTLE_TIMEOUT_S, swept(deployment, host)
    )


def assert_no_local_state(machines: list[Deployment]) -> None:
    """No outbox, ledger or lock file on any machine: the store holds it all."""
    for deployment in machines:
        assert not (deployment.data_dir / "data" / "outbox").exists()
        assert not (deployment.data_dir / "state" / "ledger").exists()


def test_two_machines_sharing_only_postgres_and_redis_deliver_every_turn_once_in_order(
    tmp_path: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    redis_url: str,
    postgres_url: str,
) -> None:
    names = [f"conv-{n:02d}" for n in range(40)]
    runs = 100
    machines = [
        machine(tmp_path, name, standin, workspace_id, redis_url, postgres_url)
        for name in ("a", "b")
    ]
    standin.faults.add("latency_ms", latency_ms=15, count=None, path_contains="/messages")
    redriver = Host(machines[0].config_dir, machines[0].data_dir)
    with fleet(machines[0]) as fleet_a, fleet(machines[1]) as fleet_b:
        killer = Killer(fleet_a + fleet_b, seed=20261216)
        hosts = [HostProcess(m, names) for m in machines]
        for turn in range(runs):  # the turns of every conversation alternate between hosts
            hosts[turn % 2].capture_turn(turn)
            killer.maybe_kill()
        for host in hosts:
            host.close()
        killer.kill_the_rest()
        settle(standin, workspace_id, names, runs, machines[1], redriver)
        lost_tasks = sum(w.log_text().count("WorkerLostError") for w in killer.killable)
    redriver.close()
    print(f"kills={killer.kills} mid-task={lost_tasks}")
    assert killer.kills >= KILLS
    assert_no_local_state(machines)
    assert_each_conversation_complete_in_order_once(standin, machines[0], workspace_id, names, runs)


def test_a_database_restarted_under_a_capture_stream_refuses_then_delivers_every_capture_once(
    tmp_path: Path, standin: HonchoStandIn, workspace_id: str, redis_url: str
) -> None:
    from memhoncho.store import schema

    cluster = PrivateCluster().init()
    cluster.start()
    try:
        schema.upgrade(cluster.url)
        deployment = machine(tmp_path, "m", standin, workspace_id, redis_url, cluster.url)
        names = [f"conv-{n:02d}" for n in range(5)]
        runs = 60
        down_until = 0.0
        refusals: list[float] = []  # seconds each refused capture took
        with fleet(deployment), Host(deployment.config_dir, deployment.data_dir) as host:
            for turn in range(runs):
                if turn == runs // 3:
                    cluster.stop("fast")  # sessions cut mid-stream
                    down_until = time.monotonic() + DOWN_S
                for name in names:
                    while True:  # a host keeps a refused run and captures it again
                        started = time.monotonic()
                        try:
                            result = host.capture(run_event(name, turn, OWNER))
                        except StoreUnavailable:
                            refusals.append(time.monotonic() - started)
                            restart_due = time.monotonic() >= down_until
                            if restart_due and not cluster_running(cluster):
                                cluster.start()
                            time.sleep(0.1)
                            continue
                        # DUPLICATE: the refused attempt had committed after all
                        assert result.status in (CaptureStatus.CAPTURED, CaptureStatus.DUPLICATE)
                        break
            settle(standin, workspace_id, names, runs, deployment, host)
        print(f"refused captures={len(refusals)} slowest={max(refusals):.2f}s")
        assert len(refusals) >= len(names)  # it was down under the stream
        assert max(refusals) < 1.0 + 2.0  # store_timeout_s, plus slack for a loaded machine
        assert_each_conversation_complete_in_order_once(
            standin, deployment, workspace_id, names, runs
        )
    finally:
        close_stores()
        cluster.destroy()


def cluster_running(cluster: PrivateCluster) -> bool:
    return (cluster.data / "postmaster.pid").exists()
