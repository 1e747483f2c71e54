"""No stranded conversation: SIGKILLed workers, no beat, no new capture, every message in.

Issue 29's scenario with real ``celery worker`` processes: 16 conversations x 25 runs from four
host threads, two workers, four SIGKILLs of pool children while they deliver (the stand-in
holds each send long enough that kills land mid-send), no beat and no re-drive by the test.
A killed worker's hint comes back on Redis only after the visibility timeout (an hour); the
workers' watchdog (``worker/watchdog.py``) must enqueue the stranded conversations again, so
everything is in Honcho, once and in order, within the fence + 15 s of the last capture.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fleet_support import (  # noqa: F401 - _amqp_vhost: a fixture
    _amqp_vhost,
    _purge_amqp,
    assert_each_conversation_complete_in_order_once,
    capture_concurrently,
    conversations,
    run_audit,
    settled,
    stored_texts,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.ids import conversation_key
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, running

KEY = "sk-stranded-workers-key"
CONVERSATIONS, RUNS, HOST_THREADS, KILLS = 16, 25, 4, 4
WORKERS = 2
SEND_LATENCY_MS = 100  # added to each send, so a kill often lands mid-send
#: the fence: 4 s of settle for a stand-in starved of CPU (as in fleet_support.settings)
HONCHO_TIMEOUT_S, SEND_SETTLE_S = 1.0, 4.0
#: the issue's bound after the last capture: the fence, then 15 s (an interval's wait and the
#: settle included); a crowded machine's start-up gets a margin on top
BOUND_S = HONCHO_TIMEOUT_S + SEND_SETTLE_S + 15.0
MARGIN_S = 15.0
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


@pytest.fixture(params=["redis", "rabbitmq", "embedded", "redis+postgresql"])
def settings(
    request: pytest.FixtureRequest,
    standin_settings: SettingsWriter,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """On Redis, RabbitMQ (a virtual host of the session's own) and the embedded broker, with
    the files; and on Redis with the PostgreSQL store (a private database)."""
    broker, _, store = request.param.partition("+")
    broker_url = None
    if broker == "redis":
        broker_url = str(request.getfixturevalue("redis_url"))
    elif broker == "rabbitmq":
        broker_url = str(request.getfixturevalue("_amqp_vhost"))
        _purge_amqp(broker_url)
    store_url = None
    if store == "postgresql":
        store_url = str(request.getfixturevalue("postgres_url"))
        monkeypatch.setenv("MEMHONCHO_STORE_URL", store_url)
    places = {k: v for k, v in {"broker_url": broker_url, "store_url": store_url}.items() if v}
    return standin_settings(
        honcho_timeout_s=HONCHO_TIMEOUT_S, send_settle_s=SEND_SETTLE_S, **places
    )


class Fleet:
    """Two workers (``running`` stops whichever ``workers`` holds). ``kill`` SIGKILLs one
    whole worker (its process group: the parent and its pool at once, so nothing acknowledges
    or requeues its hint) and starts its replacement."""

    def __init__(self, config_dir: Path, data_dir: Path) -> None:
        self.env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
        self.workers = [self._new() for _ in range(WORKERS)]
        self.dead: list[CeleryProcess] = []

    def _new(self) -> CeleryProcess:
        return CeleryProcess("worker", self.env, pool="prefork", concurrency=2)

    def kill(self, index: int) -> None:
        victim = self.workers[index]
        victim.kill()
        self.dead.append(victim)
        self.workers[index] = self._new().start(wait=False)

    def log_text(self) -> str:
        return "".join(w.log_text() for w in self.workers + self.dead)


def _kill_during_delivery(fleet: Fleet, capturing: threading.Thread) -> float:
    """Four SIGKILLs of whole workers: two while the hosts capture, two just after the last
    capture while the workers still deliver (what strands a conversation: no capture follows
    to hint it). Returns when the capture ended (monotonic)."""
    for kill in range(KILLS // 2):
        time.sleep(1.0)
        fleet.kill(kill % WORKERS)
    capturing.join()
    ended = time.monotonic()
    for kill in range(KILLS // 2, KILLS):
        time.sleep(0.3)
        fleet.kill(kill % WORKERS)
    return ended


def _wait_all_in(
    standin: HonchoStandIn,
    deployment: Deployment,
    workspace_id: str,
    names: list[str],
    start: float,
    timeout_s: float,
) -> float | None:
    """Seconds from ``start`` until the stand-in holds every message and every ledger is
    settled (all delivered, nothing in flight), or None when ``timeout_s`` ran out. Both: a
    killed worker's send can reach the stand-in while its ledger stays in flight until the
    watchdog's re-drive, past the send's fence, settles it."""
    wanted = len(names) * RUNS * 2
    store = deployment.store()
    while time.monotonic() - start < timeout_s:
        held = standin.message_count(workspace_id)
        if held >= wanted and all(
            settled(store.read_ledger(conversation_key(n)), RUNS) for n in names
        ):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def test_killed_workers_strand_nothing_without_beat_or_capture(
    host: Host,
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    settings: dict[str, Any],
) -> None:
    names = conversations(CONVERSATIONS)
    deployment = Deployment(config_dir, data_dir)
    standin.faults.add(
        "latency_ms", latency_ms=SEND_LATENCY_MS, count=None, path_contains="/messages"
    )
    fleet = Fleet(config_dir, data_dir)
    with running(fleet.workers):
        capturing = threading.Thread(
            target=capture_concurrently,
            args=(host, names, RUNS),
            kwargs={"threads": HOST_THREADS, "pace_s": 0.05},
            daemon=True,
        )
        capturing.start()
        ended = _kill_during_delivery(fleet, capturing)
        took = _wait_all_in(standin, deployment, workspace_id, names, ended, BOUND_S + MARGIN_S)
        enqueued = fleet.log_text().count("stranded conversation enqueued")
    for dead in fleet.dead:
        dead.stop()  # closes its log
    print(f"last capture to all in: {took} s; watchdog re-enqueued {enqueued}")
    assert took is not None, f"not all in {BOUND_S + MARGIN_S:.0f} s after the last capture"
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, RUNS)
    audited = run_audit(config_dir, data_dir)
    assert audited.returncode == 0, audited.stdout + audited.stderr
