"""Delivery through real ``celery worker`` processes over real Redis to the stand-in.

Captures come from threads of this process through ``Host.capture``; workers of mixed pools
deliver; the stand-in's own record of what it stored is the judge: every conversation's
messages complete, in capture order, each once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
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
from memhoncho.store import hint_marks
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter, point_at_standin
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
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


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


# ---- exactly once against a Honcho that commits after memhoncho gave up (issue 12) --------

BIG_CONVERSATIONS, BIG_RUNS = 50, 100
BIG_TIMEOUT_S = 0.5  # seconds: the workers' Honcho client timeout
#: seconds a late commit holds its request: well past the client's timeout, so that without
#: the fence the retry's reconcile (after a backoff of up to 1 s) comes before the commit
LATE_COMMIT_S = 2.0
#: seconds: the fence's settle margin; the fence (4 x 0.5 + 2.0 = 4 s) leaves a late commit
#: 2 s to land even on a loaded machine
BIG_SETTLE_S = 2.0
#: share of message writes each fault takes: 25% late commits, 10% committed then dropped,
#: 5% committed then answered 429. The plan picks the first fault whose draw hits, so each
#: probability is conditional on the earlier ones missing.
LATE_SHARE, DROP_SHARE, LIMIT_SHARE = 0.25, 0.10, 0.05
BIG_KILLS = 20  # SIGKILLs of pool children at least
BIG_KILL_GAP_S = (0.3, 1.2)  # seconds between kills, uniformly drawn
BIG_SETTLE_TIMEOUT_S = 600.0  # seconds the fleet gets to deliver everything


def plan_commit_faults(standin: HonchoStandIn) -> None:
    """Every fault commits the write; only its answer is late, lost or a 429."""
    drop = DROP_SHARE / (1 - LATE_SHARE)
    limit = LIMIT_SHARE / ((1 - LATE_SHARE) * (1 - drop))
    common: dict[str, Any] = {"count": None, "method": "POST", "path_endswith": "/messages"}
    standin.faults.add(
        "late_commit", probability=LATE_SHARE, seed=1, sleep_s=LATE_COMMIT_S, **common
    )
    standin.faults.add("drop_connection", probability=drop, seed=2, after_commit=True, **common)
    standin.faults.add(
        "http_429", probability=limit, seed=3, after_commit=True, retry_after_s=0.2, **common
    )


def wait_ledgers_complete(
    deployment: Deployment, names: list[str], runs: int, redrive: Any
) -> bool:
    """Until every ledger says all delivered and nothing in flight (re-driving a stall)."""
    deadline = time.monotonic() + BIG_SETTLE_TIMEOUT_S
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        done, held = 0, 0
        for name in names:
            ledger = read_ledger(deployment.layout, ids.conversation_key(name))
            if ledger is not None:
                held += ledger.messages_delivered
                done += ledger.messages_delivered >= runs * 2 and not ledger.in_flight
        if done == len(names):
            return True
        if held != last:
            last, last_change = held, time.monotonic()
        elif time.monotonic() - last_change > 15:
            redrive()
            last_change = time.monotonic()
        time.sleep(POLL_S)
    return False


def deliver_through_commit_faults_and_kills(
    host: Host, standin: HonchoStandIn, workspace_id: str, broker_url: str, *, fence: bool
) -> dict[str, Any]:
    """The issue's run: 50 conversations x 100 runs through faults that commit, and kills, on
    ``host``'s folders."""
    config_dir, data_dir = host.deployment.config_dir, host.deployment.data_dir
    point_at_standin(
        config_dir,
        standin,
        workspace_id,
        KEY,
        broker_url=broker_url,
        honcho_timeout_s=BIG_TIMEOUT_S,
        send_settle_s=BIG_SETTLE_S,
        send_fence=fence,
    )
    names, runs = conversations(BIG_CONVERSATIONS), BIG_RUNS
    deployment = Deployment(config_dir, data_dir)
    plan_commit_faults(standin)
    started = time.monotonic()
    with fleet(config_dir, data_dir, KILLABLE_FLEET) as workers:
        plan = KillPlan(pace_s=0.05, seed=1212, gap_s=BIG_KILL_GAP_S)
        kills = capture_under_kills(
            host,
            workers,
            names,
            runs,
            plan,
            go_on=lambda kills, capturing: kills < BIG_KILLS or capturing.is_alive(),
        )
        redrive = SweepRedrive(deployment, host)
        complete = wait_ledgers_complete(deployment, names, runs, redrive)
        time.sleep(LATE_COMMIT_S + 0.5)  # any request still held has landed by now
        mid_task = sum(w.log_text().count("WorkerLostError") for w in workers)
    elapsed = time.monotonic() - started
    fired = {f["kind"]: f["fired"] for f in standin.faults.list()}
    writes = standin.request_count(path_contains="/messages", method="POST") - (
        standin.request_count(path_contains="/messages/list")
    )
    sessions = stored_texts(standin, workspace_id)
    duplicated = sum(
        count - 1
        for messages in sessions.values()
        for count in Counter(m["metadata"][OUTBOX_ID_KEY] for m in messages).values()
    )
    figures = {
        "messages": len(names) * runs * 2,
        "stored": sum(len(m) for m in sessions.values()),
        "duplicated": duplicated,
        "faults": fired,
        "message_writes": writes,
        "kills": kills,
        "mid_task": mid_task,
        "sweep_redrives": len(redrive.times),
        "elapsed_s": round(elapsed, 1),
        "complete": complete,
    }
    print(f"fence={fence} {figures}")
    return {"figures": figures, "names": names, "runs": runs, "deployment": deployment}


@pytest.fixture
def faulty_run(
    host: Host, standin: HonchoStandIn, workspace_id: str, broker_url: str
) -> Callable[..., dict[str, Any]]:
    """``faulty_run(fence=...)``: the issue's run on this test's host, stand-in and broker."""
    if routing.is_amqp(broker_url):
        # The longest runs of the suite stay on Redis; RabbitMQ's kills, restarts and audit
        # are tests/delivery/test_store_machines_rabbitmq.py.
        pytest.skip("issue 12's run is on Redis")
    return functools.partial(
        deliver_through_commit_faults_and_kills, host, standin, workspace_id, broker_url
    )


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


@pytest.mark.timeout(1200)
def test_commits_after_the_timeout_dropped_answers_429s_and_kills_store_each_message_once(
    faulty_run: Callable[..., dict[str, Any]],
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
) -> None:
    run = faulty_run(fence=True)
    figures = run["figures"]
    assert figures["kills"] >= BIG_KILLS
    assert all(figures["faults"][k] > 0 for k in ("late_commit", "drop_connection", "http_429"))
    assert_each_conversation_complete_in_order_once(
        standin, run["deployment"], workspace_id, run["names"], run["runs"]
    )
    audited = run_audit(config_dir, data_dir)
    assert audited.returncode == 0, audited.stdout[-3000:]


@pytest.mark.timeout(1200)
def test_without_the_fence_the_same_run_stores_messages_twice_and_the_audit_says_so(
    faulty_run: Callable[..., dict[str, Any]], config_dir: Path, data_dir: Path
) -> None:
    """The run above with ``send_fence`` off: proof that the test can fail."""
    run = faulty_run(fence=False)
    assert run["figures"]["duplicated"] > 0
    audited = run_audit(config_dir, data_dir)
    assert audited.returncode == 1, audited.stdout[-3000:]
    assert "duplicated" in audited.stdout
