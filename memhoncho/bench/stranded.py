"""``memhoncho bench stranded``: how long after the last capture everything is in Honcho when
workers are SIGKILLed during delivery and no beat runs (issue 29's scenario), before and after
the workers' watchdog (``worker/watchdog.py``).

16 conversations x 25 runs captured by four host threads; two workers (prefork, two children
each); four SIGKILLs of a whole worker (its process group, so nothing acknowledges or requeues
what it held), two while the hosts capture and two just after the last capture, each worker
replaced at once; no beat, no sweep, no new capture. The stand-in (its own process) holds
each send ``SEND_LATENCY_MS``, so kills land mid-send. The clock runs from the last capture
until the stand-in holds every message (or ``--samples`` seconds pass: ``incomplete``); it
then checks none is there twice. Arms, in one run: ``before`` (workers without the watchdog,
``bench/stranded_app.py``) and ``after``, on the bench's own Redis, on RabbitMQ (a private
virtual host; ``--broker`` names another server) and on the embedded broker.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memhoncho.bench.deliver import _configure, _standin_process
from memhoncho.bench.own_redis import bench_redis
from memhoncho.capture.host import Host
from memhoncho.deployment import initialise
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY
from memhoncho.testing import StandInControl
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.runs import run_event

CONVERSATIONS, RUNS, HOST_THREADS, WORKERS, KILLS = 16, 25, 4, 2, 4
SEND_LATENCY_MS = 100
HONCHO_TIMEOUT_S, SEND_SETTLE_S = 1.0, 1.0  # the fence of an unclear send: 2 s
DEFAULT_TIMEOUT_S = 90  # seconds after the last capture before an arm is "incomplete"
OWNER = "ana@example.com"
ARMS = {"before": "memhoncho.bench.stranded_app", "after": "memhoncho.celery_app"}


def _messages(standin: StandInControl, workspace: str) -> list[str]:
    sessions = standin.state()["workspaces"].get(workspace, {}).get("sessions", {})
    return [
        str((m.get("metadata") or {}).get(OUTBOX_ID_KEY))
        for s in sessions.values()
        for m in s["messages"]
    ]


class _Fleet:
    """The workers of one arm; ``kill`` SIGKILLs one whole worker and starts its replacement."""

    def __init__(self, env: dict[str, str], app: str) -> None:
        self.env, self.app = env, app
        self.live = [self._new().start(wait=False) for _ in range(WORKERS)]
        self.all = list(self.live)
        for worker in self.live:
            worker.wait_ready()

    def _new(self) -> CeleryProcess:
        worker = CeleryProcess("worker", self.env, pool="prefork", concurrency=2)
        worker.args[worker.args.index("memhoncho.celery_app")] = self.app
        return worker

    def kill(self, index: int) -> None:
        self.live[index].kill()
        self.live[index] = self._new().start(wait=False)
        self.all.append(self.live[index])

    def stop(self) -> None:
        for worker in self.all:
            worker.stop()


@contextlib.contextmanager
def scratch_deployment(
    standin: StandInControl,
    broker: str | None,
    workspace: str,
    *,
    latency_ms: int,
    fence: tuple[float, float],
) -> Iterator[tuple[Path, Path]]:
    """The config and data dirs of a deployment of its own on a fresh stand-in that holds each
    send ``latency_ms``; ``fence``: ``honcho_timeout_s`` and ``send_settle_s``."""
    standin.reset()
    standin.add_fault("latency_ms", latency_ms=latency_ms, count=None, path_contains="/messages")
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-") as tmp:
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        values: dict[str, Any] = {
            "base_url": standin.url,
            "workspace_id": workspace,
            "honcho_timeout_s": fence[0],
            "send_settle_s": fence[1],
        }
        if broker:
            values["broker_url"] = broker
        _configure(config_dir, values)
        initialise(data_dir)
        yield config_dir, data_dir


def _arm(
    standin: StandInControl, broker: str | None, app: str, tag: str, timeout_s: float
) -> dict[str, Any]:
    workspace = f"bench-stranded-{tag}"
    names = [f"conv-{n:02d}" for n in range(CONVERSATIONS)]
    fence = (HONCHO_TIMEOUT_S, SEND_SETTLE_S)
    with scratch_deployment(
        standin, broker, workspace, latency_ms=SEND_LATENCY_MS, fence=fence
    ) as (config_dir, data_dir):
        fleet = _Fleet(memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None), app)
        try:
            with Host(config_dir, data_dir) as host:

                def capture(mine: list[str]) -> None:
                    for run in range(RUNS):
                        for name in mine:
                            host.capture(run_event(name, run, OWNER))
                        time.sleep(0.05)

                threads = [
                    threading.Thread(target=capture, args=(names[t::HOST_THREADS],), daemon=True)
                    for t in range(HOST_THREADS)
                ]
                for thread in threads:
                    thread.start()
                for kill in range(KILLS // 2):
                    time.sleep(1.0)
                    fleet.kill(kill % WORKERS)
                for thread in threads:
                    thread.join()
                last_capture = time.monotonic()
                for kill in range(KILLS // 2, KILLS):
                    time.sleep(0.3)
                    fleet.kill(kill % WORKERS)
                wanted = CONVERSATIONS * RUNS * 2
                took: float | None = None
                while time.monotonic() - last_capture < timeout_s:
                    if len(_messages(standin, workspace)) >= wanted:
                        took = round(time.monotonic() - last_capture, 2)
                        break
                    time.sleep(0.1)
                re_enqueued = sum(
                    w.log_text().count("stranded conversation enqueued") for w in fleet.all
                )
        finally:
            fleet.stop()
            adapter.close_clients()
    held = _messages(standin, workspace)
    return {
        "seconds_after_last_capture": took,
        "complete": took is not None,
        "messages": len(held),
        "of": wanted,
        "twice": len(held) - len(set(held)),
        "re_enqueued_by_watchdog": re_enqueued,
    }


@contextlib.contextmanager
def _brokers(args: argparse.Namespace) -> Iterator[dict[str, str | None]]:
    """Redis (the bench's own), RabbitMQ (a private virtual host), the embedded broker."""
    from memhoncho.testing.rabbitmq import private_vhost

    with bench_redis() as redis, contextlib.ExitStack() as stack:
        brokers: dict[str, str | None] = {}
        if redis.url:
            brokers["redis"] = redis.url
        try:
            brokers["rabbitmq"] = stack.enter_context(
                private_vhost(
                    getattr(args, "broker", None) or "amqp://guest:guest@127.0.0.1:5672//"
                )
            )
        except BaseException as exc:  # noqa: BLE001 - pytest's skip when no server: say so
            brokers["rabbitmq_unavailable"] = f"{type(exc).__name__}: {exc}"
        brokers["embedded"] = None
        yield brokers


def _flush(broker: str | None) -> None:
    """What an arm left in the broker (a killed worker's unacked hints) is not the next's."""
    if broker and broker.startswith("redis"):
        import redis

        client = redis.Redis.from_url(broker)
        client.flushdb()
        client.close()
    elif broker:
        import kombu

        from memhoncho.worker import routing

        with kombu.Connection(broker, connect_timeout=5) as conn:
            channel = conn.channel()
            for name in routing.all_queues(64):
                try:
                    channel.queue_purge(name)
                except conn.channel_errors:
                    channel = conn.channel()


def run(args: argparse.Namespace) -> dict[str, Any]:
    timeout_s = float(getattr(args, "samples", None) or DEFAULT_TIMEOUT_S)
    results: dict[str, Any] = {
        "scenario": f"{CONVERSATIONS} conversations x {RUNS} runs, {HOST_THREADS} host threads,"
        f" {WORKERS} workers, {KILLS} SIGKILLs of a whole worker during delivery, no beat",
        "send_latency_ms": SEND_LATENCY_MS,
        "fence_s": HONCHO_TIMEOUT_S + SEND_SETTLE_S,
        "timeout_s": timeout_s,
    }
    results["brokers"] = by_broker_and_arm(
        args, lambda standin, url, arm, tag: _arm(standin, url, ARMS[arm], tag, timeout_s), ARMS
    )
    return results


#: an arm's measure: (the stand-in, the broker's URL or None, the arm, a tag) -> its figures
Measure = Callable[[StandInControl, "str | None", str, str], dict[str, Any]]


def by_broker_and_arm(
    args: argparse.Namespace, measure: Measure, arms: dict[str, str]
) -> dict[str, Any]:
    """``measure`` of each arm on each broker (``_brokers``), one stand-in process for all,
    each arm starting from empty queues: ``{broker: {arm: figures}}``, and why a broker
    could not be measured."""
    found: dict[str, Any] = {}
    with _standin_process() as standin, _brokers(args) as brokers:
        for kind, url in brokers.items():
            if kind.endswith("_unavailable"):
                found[kind] = url
                continue
            figures = {}
            for arm in arms:
                _flush(url)
                figures[arm] = measure(standin, url, arm, f"{kind}-{arm}")
            _flush(url)
            found[kind] = figures
    return found
