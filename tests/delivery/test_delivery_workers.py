"""Delivery through real ``celery worker`` processes over real Redis to the stand-in.

Captures come from threads of this process through ``Host.capture``; workers of mixed pools
deliver; the stand-in's own record of what it stored is the judge: every conversation's
messages complete, in capture order, each once.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from memhoncho import ids
from memhoncho.capture import OUTBOX_ID_KEY
from memhoncho.deployment import Deployment
from memhoncho.host import Host
from memhoncho.store import hint_marks
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.runs import expected_texts, run_event
from memhoncho.upkeep.sweep import sweep

KEY = "sk-delivery-workers-key"
OWNER = "ana@example.com"
CAPTURE_THREADS = 6
POLL_S = 0.5  # seconds between looks at the stand-in while waiting
SETTLE_TIMEOUT_S = 240.0  # seconds the workers get to deliver everything
#: (pool, concurrency) of the workers of the mixed fleet: 4 processes, 3 pool shapes
MIXED_FLEET = (("prefork", 1), ("prefork", 1), ("prefork", 2), ("threads", 2))
KILLABLE_FLEET = (("prefork", 2), ("prefork", 2), ("prefork", 1), ("threads", 2))
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


@pytest.fixture
def settings(
    config_dir: Path, standin: HonchoStandIn, workspace_id: str, redis_url: str
) -> dict[str, Any]:
    return point_at_standin(
        config_dir, standin, workspace_id, KEY, broker_url=redis_url, honcho_timeout_s=1.0
    )


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
    try:
        for worker in workers:
            worker.start(wait=False)
        for worker in workers:
            worker.wait_ready()
        yield workers
    finally:
        for worker in workers:
            worker.stop()


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


def stored_texts(standin: HonchoStandIn, workspace_id: str) -> dict[str, list[dict[str, Any]]]:
    return {s["id"]: s["messages"] for s in standin.sessions(workspace_id)}


def wait_delivered(
    standin: HonchoStandIn,
    workspace_id: str,
    names: list[str],
    runs: int,
    timeout_s: float = SETTLE_TIMEOUT_S,
    redrive: Any = None,
) -> None:
    """Until the stand-in holds at least every expected message (or the time is up)."""
    wanted = len(names) * runs * 2
    deadline = time.monotonic() + timeout_s
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        held = sum(len(m) for m in stored_texts(standin, workspace_id).values())
        if held >= wanted:
            return
        if held != last:
            last, last_change = held, time.monotonic()
        elif redrive is not None and time.monotonic() - last_change > 10:
            redrive()  # what the sweep does every 15 minutes, sooner
            last_change = time.monotonic()
        time.sleep(POLL_S)


def assert_each_conversation_complete_in_order_once(
    standin: HonchoStandIn, deployment: Deployment, workspace_id: str, names: list[str], runs: int
) -> None:
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
        ledger = read_ledger(deployment.layout, ids.conversation_key(name))
        if ledger is None or ledger.in_flight or ledger.messages_delivered != len(expected):
            problems.append(f"{name}: ledger {ledger and ledger.model_dump(exclude={'anchors'})}")
    assert not problems, "\n".join(problems[:20])


def test_fifty_conversations_of_two_hundred_runs_arrive_complete_in_order_once(
    host: Host, config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    names, runs = conversations(50), 200
    with fleet(config_dir, data_dir, MIXED_FLEET):
        capture_concurrently(host, names, runs)
        wait_delivered(standin, workspace_id, names, runs)
    assert_each_conversation_complete_in_order_once(
        standin, Deployment(config_dir, data_dir), workspace_id, names, runs
    )
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
    redrives: list[float] = []

    def redrive() -> None:
        redrives.append(time.monotonic())
        sweep(deployment, host.enqueue_delivery)

    with fleet(config_dir, data_dir, KILLABLE_FLEET) as workers:
        killable = [
            w for w, (pool, _) in zip(workers, KILLABLE_FLEET, strict=True) if pool == "prefork"
        ]
        capturing = threading.Thread(
            target=capture_concurrently,
            args=(host, names, runs),
            kwargs={"threads": 2, "pace_s": 0.2},
            daemon=True,
        )
        capturing.start()
        rng = random.Random(20261203)
        kills = 0
        while kills < KILLS:
            time.sleep(rng.uniform(*KILL_GAP_S))
            if rng.choice(killable).kill_child(signal.SIGKILL) is not None:
                kills += 1
        capturing.join()
        wait_delivered(standin, workspace_id, names, runs, redrive=redrive)
        mid_task = sum(w.log_text().count("WorkerLostError") for w in workers)
    print(f"kills={kills} mid-task={mid_task} sweep re-drives={len(redrives)}")
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
            standin,
            workspace_id,
            names,
            runs,
            redrive=lambda: sweep(deployment, host.enqueue_delivery),
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
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The flushed hints' marks still say "a hint waits"; past STALE_S the next capture no
    # longer believes them (store/hint_marks.py). A short bound keeps the test short.
    monkeypatch.setattr(hint_marks, "STALE_S", 1.0)
    names, runs = conversations(10), 20
    deployment = Deployment(config_dir, data_dir)
    broker = redis.Redis.from_url(redis_url)
    capture_concurrently(host, names, runs, threads=2)  # no worker yet: the hints wait
    broker.flushdb()
    with fleet(config_dir, data_dir, (("prefork", 2),)):
        time.sleep(2.0)  # the workers have nothing to go on
        assert stored_texts(standin, workspace_id) == {}
        for name in names[:5]:  # the next capture re-drives its conversation's whole backlog
            host.capture(run_event(name, runs, OWNER))
        wait_delivered(standin, workspace_id, names[:5], runs + 1)
        assert_each_conversation_complete_in_order_once(
            standin, deployment, workspace_id, names[:5], runs + 1
        )
        # Flushed again with deliveries under way; the sweep re-drives what is left.
        standin.faults.add("latency_ms", latency_ms=200, count=None, path_contains="/messages")
        for name in names[5:]:
            host.capture(run_event(name, runs, OWNER))
        broker.flushdb()
        report = sweep(deployment, host.enqueue_delivery)
        assert report.enqueued >= 1
        wait_delivered(standin, workspace_id, names, runs + 1)
    assert_each_conversation_complete_in_order_once(
        standin, deployment, workspace_id, names, runs + 1
    )
    broker.close()
