"""The worker tests' fleet, fixtures, capture and judging (``test_delivery_workers.py``,
``test_delivery_faults_workers.py``, ``test_commit_faults_workers.py`` and the others that
import from here).

Captures come from threads of the test's process through ``Host.capture``; workers of mixed
pools deliver; the stand-in's own record of what it stored is the judge: every conversation's
messages complete, in capture order, each once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.models import OUTBOX_ID_KEY, Ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, running
from memhoncho.testing.rabbitmq import private_vhost
from memhoncho.testing.runs import expected_texts, run_event
from memhoncho.upkeep.sweep import sweep
from memhoncho.worker import routing

KEY = "sk-delivery-workers-key"
OWNER = "ana@example.com"
CAPTURE_THREADS = 6
POLL_S = 0.5  # seconds between looks at the stand-in while waiting
SETTLE_TIMEOUT_S = 240.0  # seconds the workers get to deliver everything
#: seconds the ledgers get to settle once Honcho holds every message (a retry past its fence)
LEDGER_SETTLE_S = 60.0
REDRIVE_AFTER_S = 10.0  # seconds without progress before a wait re-drives, as the sweep would
#: (pool, concurrency) of the workers of the mixed fleet: 4 processes, 3 pool shapes
MIXED_FLEET = (("prefork", 1), ("prefork", 1), ("prefork", 2), ("threads", 2))
KILLABLE_FLEET = (("prefork", 2), ("prefork", 2), ("prefork", 1), ("threads", 2))


@pytest.fixture(scope="session")
def _amqp_vhost() -> Iterator[str]:
    with private_vhost() as url:
        yield url


@pytest.fixture(params=["redis", "amqp"])
def broker_url(request: pytest.FixtureRequest) -> str:
    """Each test on both brokers: Redis, and RabbitMQ (a virtual host of the session's own)."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    url = str(request.getfixturevalue("_amqp_vhost"))
    _purge_amqp(url)
    return url


def _purge_amqp(url: str, *, delete: bool = True) -> None:
    """Every memhoncho queue of the virtual host emptied (``delete``: removed, so a test
    before leaves nothing, as a Redis test's fresh database)."""
    import kombu

    with kombu.Connection(url, connect_timeout=5) as conn:
        channel = conn.channel()
        for name in [*routing.deliver_queues(64), routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE]:
            try:
                channel.queue_delete(name) if delete else channel.queue_purge(name)
            except Exception:  # noqa: BLE001 - not there; a closed channel is reopened
                channel = conn.channel()


def flush_broker(url: str) -> None:
    """Every queued hint lost, as a broker flushed or restarted without its queues."""
    if routing.is_amqp(url):
        _purge_amqp(url, delete=False)
        return
    broker = redis.Redis.from_url(url)
    broker.flushdb()
    broker.close()


@pytest.fixture
def settings(standin_settings: SettingsWriter, broker_url: str) -> dict[str, Any]:
    # The fence after an unclear send: the 1 s deadline, then 4 s for the stand-in to commit
    # a send whose client gave up. The stand-in is a thread of the test's process, beside its
    # capture threads: on CI's loaded machine (2026-12-06) a fence of 1 + 1 s let a send that
    # timed out commit after the retry's reconcile had looked, and fifty[redis] stored 56
    # messages twice. A real Honcho is given 30 + 30 s by default.
    return standin_settings(broker_url=broker_url, honcho_timeout_s=1.0, send_settle_s=4.0)


@contextlib.contextmanager
def fleet(
    config_dir: Path, data_dir: Path, shapes: Sequence[tuple[str, int]]
) -> Iterator[list[CeleryProcess]]:
    """Worker processes of the given (pool, concurrency) shapes, started together."""
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    workers = [
        CeleryProcess("worker", env, pool=pool, concurrency=concurrency)
        for pool, concurrency in shapes
    ]
    with running(workers):
        yield workers


def conversations(count: int) -> list[str]:
    return [f"conv-{n:03d}" for n in range(count)]


def capture_concurrently(
    host: Host, names: list[str], runs: int, threads: int = CAPTURE_THREADS, pace_s: float = 0.0
) -> None:
    """Each thread captures its conversations' runs in order, interleaved across them."""
    failures: list[BaseException] = []

    def work(mine: list[str]) -> None:
        try:
            for i in range(runs):
                for name in mine:
                    host.capture(run_event(name, i, OWNER))
                if pace_s:
                    time.sleep(pace_s)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    workers = [
        threading.Thread(target=work, args=(names[t::threads],), daemon=True)
        for t in range(threads)
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert not failures, failures


@dataclasses.dataclass(frozen=True)
class KillPlan:
    """How ``capture_under_kills`` captures and kills."""

    pace_s: float  # seconds each capturing thread waits between its rounds of runs
    seed: int  # of the random gaps and victims
    gap_s: tuple[float, float]  # seconds between two kills, uniformly drawn
    threads: int = 2  # capturing threads


def capture_under_kills(
    host: Host,
    workers: list[CeleryProcess],
    names: list[str],
    runs: int,
    plan: KillPlan,
    go_on: Callable[[int, threading.Thread], bool],
) -> int:
    """Capture as ``plan`` says while SIGKILLing random prefork pool children of a
    ``KILLABLE_FLEET`` as long as ``go_on(kills so far, the capturing thread)``; then wait for
    the capture to end. Returns how many were killed."""
    killable = [
        w for w, (pool, _) in zip(workers, KILLABLE_FLEET, strict=True) if pool == "prefork"
    ]
    capturing = threading.Thread(
        target=capture_concurrently,
        args=(host, names, runs),
        kwargs={"threads": plan.threads, "pace_s": plan.pace_s},
        daemon=True,
    )
    capturing.start()
    rng = random.Random(plan.seed)
    kills = 0
    while go_on(kills, capturing):
        time.sleep(rng.uniform(*plan.gap_s))
        if rng.choice(killable).kill_child(signal.SIGKILL) is not None:
            kills += 1
    capturing.join()
    return kills


class SweepRedrive:
    """What the sweep does every 15 minutes, sooner; ``times`` says when it was asked to."""

    def __init__(self, deployment: Deployment, host: Host) -> None:
        self.deployment, self.host = deployment, host
        self.times: list[float] = []

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        sweep(self.deployment, self.host.enqueue_delivery)


def stored_texts(standin: HonchoStandIn, workspace_id: str) -> dict[str, list[dict[str, Any]]]:
    return {s["id"]: s["messages"] for s in standin.sessions(workspace_id)}


def wait_delivered(
    standin: HonchoStandIn,
    deployment: Deployment,
    workspace_id: str,
    names: list[str],
    runs: int,
    timeout_s: float = SETTLE_TIMEOUT_S,
    redrive: Any = None,
) -> None:
    """Until the stand-in holds at least every expected message and every ledger is settled
    (or the time is up). Both, and with the workers still running: a send that timed out after
    Honcho stored it, or whose worker was killed, leaves its ledger in flight until a retry
    past the fence reconciles it, seconds after the messages are in. A fleet stopped at the
    stand-in's count alone left that retry unrun (CI, 2026-12-07)."""
    wanted = len(names) * runs * 2
    store = deployment.store()
    deadline = time.monotonic() + timeout_s
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        held = standin.message_count(workspace_id)
        ledgers = [store.read_ledger(ids.conversation_key(name)) for name in names]
        if held >= wanted and all(settled(ledger, runs) for ledger in ledgers):
            return
        progress = held + sum(ledger.messages_delivered for ledger in ledgers if ledger)
        if progress != last:
            last, last_change = progress, time.monotonic()
        elif redrive is not None and time.monotonic() - last_change > REDRIVE_AFTER_S:
            redrive()  # what the sweep does every 15 minutes, sooner
            last_change = time.monotonic()
        time.sleep(POLL_S)


def settled(ledger: Ledger | None, runs: int) -> bool:
    """All ``runs`` delivered (two messages each), nothing in flight."""
    return ledger is not None and not ledger.in_flight and ledger.messages_delivered == runs * 2


def swept(deployment: Deployment, host: Host) -> Callable[[], object]:
    """A re-drive for ``wait_delivered``: sweep ``deployment`` into ``host``'s queue, as the
    sweep task does."""
    return lambda: sweep(deployment, host.enqueue_delivery)


def wait_ledgers_settled(
    deployment: Deployment, names: list[str], runs: int, timeout_s: float = LEDGER_SETTLE_S
) -> None:
    """Until every ledger holds all ``runs`` delivered with nothing in flight (or the time is
    up), for a test that waited on something else than ``wait_delivered``."""
    store = deployment.store()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(settled(store.read_ledger(ids.conversation_key(name)), runs) for name in names):
            return
        time.sleep(POLL_S)


def assert_each_conversation_complete_in_order_once(
    standin: HonchoStandIn, deployment: Deployment, workspace_id: str, names: list[str], runs: int
) -> None:
    wait_ledgers_settled(deployment, names, runs)
    sessions = stored_texts(standin, workspace_id)
    problems: list[str] = []
    for name in names:
        messages = sessions.get(ids.session_id(workspace_id, name), [])
        texts = [m["content"] for m in messages]
        outbox_ids = Counter(m["metadata"][OUTBOX_ID_KEY] for m in messages)
        twice = sum(1 for count in outbox_ids.values() if count > 1)
        expected = expected_texts(name, runs)
        if texts != expected:
            lost = len(set(expected) - set(texts))
            problems.append(
                f"{name}: {len(texts)} stored of {len(expected)}, {lost} lost, {twice} twice, "
                f"in order: {sorted(texts, key=expected.index) == texts if not lost else '?'}"
            )
        ledger = deployment.store().read_ledger(ids.conversation_key(name))  # files or database
        if ledger is None or ledger.in_flight or ledger.messages_delivered != len(expected):
            problems.append(f"{name}: ledger {ledger and ledger.model_dump(exclude={'anchors'})}")
    assert not problems, "\n".join(problems[:20])


def run_audit(config_dir: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``memhoncho audit`` as an operator runs it, in its own process."""
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    return subprocess.run(
        # The console script's entry point (memhoncho.cli is a package with no __main__).
        [
            sys.executable,
            "-c",
            "import sys; from memhoncho.cli import main; sys.exit(main(['audit']))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
