"""``memhoncho bench deliver``: messages/s end to end through real workers to the stand-in.

Measured in one run, against one stand-in (its own process) that adds ``LATENCY_MS`` to every
request, with the same worker fleet, on the bench's own Redis (``bench.own_redis``) when there
is one, or else the embedded filesystem broker:

- **memhoncho**: ``Host.capture`` of every run (outbox append + fsync + a delivery hint), then
  ``memhoncho.deliver`` in the workers: coalesced, exactly once, in order.
- **memhoncho_drain**: delivery alone: the same backlog captured with no API key (so no hint),
  then one hint per conversation.
- **naive**: the baseline the issue names: one task per run carrying its messages, one
  ``add_messages`` call per run (``deliver_naive.py``), published from the same process.

Each runs with 1, 4 and 16 conversations in flight, every conversation with the same runs (one
capturing or publishing thread each, back to back). The clock runs from the first capture or
publish until every message is acknowledged (the ledgers; for the naive arm, its send count),
and the stand-in's own count is checked after (``lost``, ``duplicated``: by outbox id). Also:
Honcho requests per message, hints published per capture (they coalesce: a conversation whose
hint still waits gets no second one), and the ratio of memhoncho's end-to-end figure to the
naive baseline's; the goal is >= 5x at 4 and at 16 conversations.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.bench.deliver_brokers import _wait_idle, _without_password, kind_of
from memhoncho.bench.deliver_naive import NAIVE_QUEUE, NAIVE_TASK
from memhoncho.bench.own_redis import bench_redis
from memhoncho.capture.host import Host
from memhoncho.capture.record import build_record
from memhoncho.deployment import initialise
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY, RunEvent
from memhoncho.store.ledger import read_ledger
from memhoncho.testing import StandInControl
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, running
from memhoncho.testing.runs import run_event
from memhoncho.worker import routing

LATENCY_MS = 20.0  # added by the stand-in to every request
IN_FLIGHT = (1, 4, 16)  # conversations captured concurrently
GOAL_RATIO = 12.0  # end to end against the naive baseline (issue 33; 5x in issue 15) ...
GOAL_IN_FLIGHT = (4, 16)  # ... at these levels; one conversation is bound by one fsync a run
DEFAULT_RUNS = 120  # runs of each conversation in flight (two messages each)
#: (pool, concurrency) of the worker fleet, the same for both arms: 4 processes on 2 cores
FLEET = (("prefork", 2), ("prefork", 2))
#: seconds between looks at the ledgers (memhoncho) or at the stand-in (naive, which has no
#: ledger): a look at the stand-in copies its store under its lock, so it is rarer
LEDGER_POLL_S = 0.01
STANDIN_POLL_S = 0.25
SETTLE_TIMEOUT_S = 300.0  # seconds one measurement may take before it is reported unfinished
OWNER = "bench@example.com"
KEY = "bench-key"  # the stand-in accepts any key


def _configure(config_dir: Path, values: dict[str, Any]) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(values))
    (config_dir / "secrets.json").write_text(json.dumps({"api-key": KEY}))


def _held(standin: StandInControl, workspace: str) -> int:
    sessions = standin.state()["workspaces"].get(workspace, {}).get("sessions", {})
    return sum(len(s["messages"]) for s in sessions.values())


@contextlib.contextmanager
def _standin_process() -> Iterator[StandInControl]:
    """``memhoncho stand-in`` in its own process, so it never shares the host's GIL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "memhoncho", "stand-in", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # "... listening on <url>"
        yield StandInControl(f"http://127.0.0.1:{port}")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _reset(standin: StandInControl) -> None:
    """A fresh stand-in with every request ``LATENCY_MS`` slower."""
    standin.reset()
    standin.add_fault("latency_ms", latency_ms=LATENCY_MS, count=None)


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _measure(
    standin: StandInControl,
    workspace: str,
    messages: int,
    start: Callable[[], None],
    progress: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """Time ``start()`` until ``progress()`` (else the stand-in's count) reaches ``messages``."""
    look, poll_s = (progress, LEDGER_POLL_S) if progress else (None, STANDIN_POLL_S)
    requests_before = standin.request_count()
    began = time.perf_counter()
    start()
    published_s = time.perf_counter() - began
    deadline = began + SETTLE_TIMEOUT_S
    while time.perf_counter() < deadline:
        if (look() if look else _held(standin, workspace)) >= messages:
            break
        time.sleep(poll_s)
    elapsed = time.perf_counter() - began
    held = _held(standin, workspace)  # the stand-in is the judge of what arrived (untimed)
    while held < messages and time.perf_counter() < deadline:  # a counted send still in flight
        time.sleep(LEDGER_POLL_S)
        held = _held(standin, workspace)
    calls = standin.request_count() - requests_before
    distinct = _distinct(standin, workspace)
    return {
        "messages": messages,
        "held": held,
        "lost": messages - distinct,
        "duplicated": held - distinct,
        "finished": held >= messages,
        "seconds": round(elapsed, 3),
        "messages_per_s": round(held / elapsed, 1),
        "capture_or_publish_s": round(published_s, 3),
        "honcho_calls": calls,
        "calls_per_message": round(calls / max(held, 1), 4),
    }


def _distinct(standin: StandInControl, workspace: str) -> int:
    """Messages the stand-in holds, each outbox id counted once (the rest are duplicates)."""
    sessions = standin.state()["workspaces"].get(workspace, {}).get("sessions", {})
    return len(
        {
            (sid, (m.get("metadata") or {}).get(OUTBOX_ID_KEY), m.get("content"))
            for sid, s in sessions.items()
            for m in s["messages"]
        }
    )


def _ledger_progress(host: Host, names: list[str]) -> Callable[[], int]:
    """Messages the conversations' ledgers say Honcho acknowledged (written after each ack)."""
    keys = [ids.conversation_key(name) for name in names]

    def look() -> int:
        total = 0
        for key in keys:
            ledger = read_ledger(host.deployment.layout, key)
            total += ledger.messages_delivered if ledger else 0
        return total

    return look


def _memhoncho_arm(
    host: Host, standin: StandInControl, workspace: str, conversations: int, runs: int, tag: str
) -> dict[str, Any]:
    per_conversation = runs

    def capture(n: int) -> None:
        for i in range(per_conversation):
            host.capture(run_event(f"{tag}-{n}", i, OWNER))

    messages = conversations * per_conversation * 2
    names = [f"{tag}-{n}" for n in range(conversations)]
    hints_before = host.hints_published
    measured = _measure(
        standin,
        workspace,
        messages,
        lambda: _in_threads(conversations, capture),
        _ledger_progress(host, names),
    )
    captures = conversations * per_conversation
    hints = host.hints_published - hints_before
    return {**measured, "hints_published": hints, "hints_per_capture": round(hints / captures, 4)}


def _drain_arm(
    host: Host,
    standin: StandInControl,
    workspace: str,
    config_dir: Path,
    conversations: int,
    runs: int,
    tag: str,
) -> dict[str, Any]:
    """Delivery alone: a backlog captured with no key (so no hint), then one hint each."""
    per_conversation = runs
    secrets = config_dir / "secrets.json"
    secrets.unlink()

    def capture(n: int) -> None:
        for i in range(per_conversation):
            host.capture(run_event(f"{tag}-{n}", i, OWNER))

    _in_threads(conversations, capture)
    secrets.write_text(json.dumps({"api-key": KEY}))
    time.sleep(0.1)  # past the settings cache's racy window: the key is seen at once
    messages = conversations * per_conversation * 2

    def hint() -> None:
        for n in range(conversations):
            host.enqueue_delivery(f"{tag}-{n}")

    names = [f"{tag}-{n}" for n in range(conversations)]
    return _measure(standin, workspace, messages, hint, _ledger_progress(host, names))


def _naive_arm(
    host: Host, standin: StandInControl, workspace: str, conversations: int, runs: int, tag: str
) -> dict[str, Any]:
    per_conversation = runs
    celery = host.celery()
    user = ids.peer_id(OWNER)
    agent = host.deployment.settings().agent_peer_id

    def publish(n: int) -> None:
        conversation = f"{tag}-{n}"
        sid = ids.session_id(workspace, conversation)
        for i in range(per_conversation):
            record = build_record(
                RunEvent.model_validate(run_event(conversation, i, OWNER)),
                user_peer_id=user,
                max_message_length=25_000,
                captured_at=time.time(),
            )
            assert record is not None
            messages = [
                {
                    "peer_id": agent if m["role"] == "agent" else user,
                    "content": m["text"],
                    "metadata": m["meta"],
                }
                for m in record["messages"]
            ]
            celery.send_task(
                NAIVE_TASK, args=[sid, user, messages], queue=NAIVE_QUEUE, ignore_result=True
            )

    messages = conversations * per_conversation * 2
    before = standin.request_count(path_contains="/messages", method="POST")

    def progress() -> int:  # one add_messages of two messages per run; the stand-in judges
        return 2 * (standin.request_count(path_contains="/messages", method="POST") - before)

    return _measure(
        standin, workspace, messages, lambda: _in_threads(conversations, publish), progress
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The arms on Redis (else the embedded broker), and with ``--broker`` on that broker too."""
    runs = getattr(args, "samples", None) or DEFAULT_RUNS
    with bench_redis() as redis:
        results = measure(redis.url or None, runs)
    other = getattr(args, "broker", None)
    if other:
        results = {"brokers": {results["broker"]: results, "rabbitmq": measure(other, runs)}}
        results["ratio_min"] = {k: v["ratio_min"] for k, v in results["brokers"].items()}
    return results


def measure(broker: str | None, runs: int) -> dict[str, Any]:
    """The three arms on one broker (None: the embedded one), the same stand-in and fleet."""
    results: dict[str, Any] = {
        "broker": kind_of(broker) if broker else "embedded-filesystem",
        "broker_url": _without_password(broker) if broker else "filesystem://",
        "latency_ms": LATENCY_MS,
        "runs_per_conversation": runs,
        "messages_per_run": 2,
        "fleet": [{"pool": pool, "concurrency": c} for pool, c in FLEET],
        "baseline": "one task per run carrying its messages, one add_messages call per run "
        "(memhoncho/bench/deliver_naive.py), same workers, broker and stand-in",
        "in_flight": {},
    }
    with (
        _standin_process() as standin,
        tempfile.TemporaryDirectory(prefix="memhoncho-bench-deliver-") as tmp,
    ):
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        workspace = "memhoncho-bench-deliver"
        values: dict[str, Any] = {"base_url": standin.url, "workspace_id": workspace}
        if broker:
            values["broker_url"] = broker
        _configure(config_dir, values)
        initialise(data_dir)  # as `memhoncho init`: workers refuse a new folder
        env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
        queues = [*routing.deliver_queues(8), NAIVE_QUEUE]
        workers = [
            CeleryProcess(
                "worker",
                env,
                pool=pool,
                concurrency=concurrency,
                queues=queues,
                extra_args=["--include", "memhoncho.bench.deliver_naive"],
            )
            for pool, concurrency in FLEET
        ]
        try:
            with running(workers), Host(config_dir, data_dir) as host:
                for level in IN_FLIGHT:
                    # One workspace for both arms; distinct conversations per measurement.
                    _reset(standin)
                    ours = _memhoncho_arm(host, standin, workspace, level, runs, f"m{level}")
                    _wait_idle(broker, data_dir, queues)
                    _reset(standin)
                    drain = _drain_arm(
                        host, standin, workspace, config_dir, level, runs, f"d{level}"
                    )
                    _wait_idle(broker, data_dir, queues)
                    _reset(standin)
                    naive = _naive_arm(host, standin, workspace, level, runs, f"n{level}")
                    _wait_idle(broker, data_dir, queues)
                    results["in_flight"][str(level)] = {
                        "memhoncho": ours,
                        "memhoncho_drain": drain,
                        "naive": naive,
                        "ratio": round(
                            ours["messages_per_s"] / max(naive["messages_per_s"], 1e-9), 2
                        ),
                    }
        finally:
            adapter.close_clients()
    ratios = [v["ratio"] for v in results["in_flight"].values()]
    results["ratio_min"] = min(ratios)
    results["goal_ratio"] = GOAL_RATIO
    results["goal_in_flight"] = list(GOAL_IN_FLIGHT)
    results["goal_met"] = all(
        results["in_flight"][str(level)]["ratio"] >= GOAL_RATIO for level in GOAL_IN_FLIGHT
    )
    return results
