"""Beat keeps memhoncho healthy: real workers, a real beat on short schedules, real Redis, the
stand-in over HTTP, and the ``memhoncho`` command as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.capture.record import build_record
from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY, RunEvent
from memhoncho.recall.memory import SectionsStatus
from memhoncho.store.deadletters import read_dead
from memhoncho.store.outbox import Outbox
from memhoncho.testing import HonchoStandIn, processes
from memhoncho.testing.config import write_api_key
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.upkeep.sweep import sweep
from memhoncho.worker import routing

pytestmark = pytest.mark.slow

API_KEY = "test-key"
OWNER = "ana@example.com"
DEAD_BROKER = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
WAIT_S = 60.0  # seconds any one expectation may take to come true
POLL_S = 0.1
SHORT_SCHEDULE = {
    "MEMHONCHO_SWEEP_INTERVAL_S": "1",
    "MEMHONCHO_REFRESH_INTERVAL_S": "1",
}
DAY_S = 86_400.0


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    return processes.wait_until(check, what, timeout_s, POLL_S)


def run(conversation: str, n: int, *, answered: bool = True) -> dict[str, Any]:
    outcome: dict[str, Any] = {"status": "unanswered"}
    if answered:
        outcome = {
            "status": "answered",
            "answer": {"entry_id": 2 * n + 1, "content": [{"type": "text", "text": f"a{n}"}]},
        }
    return {
        "conversation_id": conversation,
        "owner": OWNER,
        "run_id": f"run-{n}",
        "inputs": [{"entry_id": 2 * n, "text": f"u{n} in {conversation}"}],
        "outcome": outcome,
    }


def expected_texts(conversation: str, runs: range) -> list[str]:
    return [text for n in runs for text in (f"u{n} in {conversation}", f"a{n}")]


class Site:
    """One data directory with its settings; workers, beat and CLI runs on demand."""

    def __init__(
        self, config_dir: Path, data_dir: Path, standin: HonchoStandIn, ws: str, redis: str
    ) -> None:
        self.config_dir, self.data_dir = config_dir, data_dir
        self.standin, self.workspace, self.redis = standin, ws, redis
        self.deployment = Deployment(config_dir, data_dir)
        self.processes: list[CeleryProcess] = []
        self.settings(broker_url=redis)
        write_api_key(config_dir, API_KEY)

    def settings(self, **values: Any) -> None:
        values = {"base_url": self.standin.url, "workspace_id": self.workspace, **values}
        (self.config_dir / "settings").mkdir(parents=True, exist_ok=True)
        (self.config_dir / "settings" / "memhoncho.json").write_text(json.dumps(values))

    def env(self, **extra: str) -> dict[str, str]:
        return memhoncho_env(
            config_dir=self.config_dir,
            data_dir=self.data_dir,
            broker_url=self.redis,
            base_url=self.standin.url,
            workspace_id=self.workspace,
            api_key=API_KEY,
            extra={**SHORT_SCHEDULE, **extra},
        )

    def worker(self, concurrency: int = 2, **extra: str) -> CeleryProcess:
        queues = [*routing.deliver_queues(8), routing.MAINTENANCE_QUEUE]
        process = CeleryProcess("worker", self.env(**extra), queues=queues, concurrency=concurrency)
        self.processes.append(process)
        return process.start()

    def beat(self, **extra: str) -> CeleryProcess:
        process = CeleryProcess("beat", self.env(**extra))
        self.processes.append(process)
        return process.start()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memhoncho", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def texts(self, conversation: str) -> list[str]:
        session = ids.session_id(self.workspace, conversation)
        return [m["content"] for m in self.standin.messages(self.workspace, session)]

    def outbox_ids(self, conversation: str) -> list[str]:
        session = ids.session_id(self.workspace, conversation)
        return [
            m["metadata"].get(OUTBOX_ID_KEY) for m in self.standin.messages(self.workspace, session)
        ]

    def outbox_batches(self, conversation: str) -> list[str]:
        key = ids.conversation_key(conversation)
        return [r["batch_id"] for r in Outbox(self.deployment.layout).read(key).records]

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


@pytest.fixture
def site(
    config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str, redis_url: str
) -> Iterator[Site]:
    running = Site(config_dir, data_dir, standin, workspace_id, redis_url)
    try:
        yield running
    finally:
        running.stop()


def test_a_capture_made_while_the_broker_was_down_is_delivered_by_the_next_sweep(
    site: Site,
) -> None:
    site.settings(broker_url=DEAD_BROKER)  # the host's broker is down; workers' is not
    with Host(site.config_dir, site.data_dir) as host:
        results = [host.capture(run("c-down", n)) for n in range(3)]
    assert [(r.status, r.enqueued) for r in results] == [("captured", False)] * 3
    site.worker()
    site.beat()
    expected = expected_texts("c-down", range(3))
    wait_until(lambda: len(site.texts("c-down")) >= len(expected), "the sweep's delivery")
    time.sleep(2.5)  # two more sweeps: nothing is delivered twice
    assert site.texts("c-down") == expected


def test_compaction_keeps_every_pending_record_and_drops_the_delivered_ones(
    site: Site,
) -> None:
    conversation = "c-compact"
    worker = site.worker()
    with Host(site.config_dir, site.data_dir) as host:
        for n in range(5):
            host.capture(run(conversation, n))
        wait_until(lambda: len(site.texts(conversation)) == 10, "the first five runs")
        worker.stop()  # the next hints wait in Redis, unconsumed
        pending = [host.capture(run(conversation, n)) for n in range(5, 8)]
    enqueued: list[str] = []
    report = sweep(site.deployment, lambda cid: enqueued.append(cid) or True)
    assert report.dropped_delivered == 5 and report.dead_lettered == 0
    assert enqueued == [conversation]
    assert site.outbox_batches(conversation) == [r.batch_id for r in pending]
    site.worker()
    site.beat()
    expected = expected_texts(conversation, range(8))
    wait_until(lambda: site.texts(conversation) == expected, "the pending runs")
    wait_until(lambda: site.outbox_batches(conversation) == [], "the last compaction")
    assert site.texts(conversation) == expected


def _old_record(site: Site, conversation: str, n: int, age_s: float) -> dict[str, Any]:
    record = build_record(
        RunEvent.model_validate(run(conversation, n)),
        user_peer_id=ids.peer_id(OWNER),
        max_message_length=25_000,
        captured_at=time.time() - age_s,
    )
    assert record is not None
    Outbox(site.layout).append(
        ids.conversation_key(conversation),
        record,
        max_pending=100,
        delivered_seq=lambda: 0,
        delivered_before=lambda b: False,
    )
    return record


def test_retention_moves_records_to_dead_letters_and_replay_delivers_them_once(
    site: Site,
) -> None:
    conversation = "c-retained"
    key = ids.conversation_key(conversation)
    old = [_old_record(site.deployment, conversation, n, 31 * DAY_S) for n in range(2)]
    swept = site.cli("sweep", "--json")  # no worker yet: nothing can deliver them first
    report = json.loads(swept.stdout)
    assert report["dead_lettered"] == 2, swept.stderr
    assert swept.stderr.count("moved to the dead-letter file") == 2
    assert site.outbox_batches(conversation) == []
    assert [r["batch_id"] for r in read_dead(site.deployment.layout, key)] == [
        r["batch_id"] for r in old
    ]
    site.worker()  # the sweep's hints find nothing left to deliver
    time.sleep(2)
    assert site.texts(conversation) == []
    replayed = site.cli("replay", "--conversation", conversation, "--json")
    assert json.loads(replayed.stdout)["replayed"] == 2, replayed.stderr
    assert not site.deployment.layout.dead(key).exists()
    expected = expected_texts(conversation, range(2))
    wait_until(lambda: site.texts(conversation) == expected, "the replayed records")
    again = json.loads(site.cli("sweep", "--json").stdout)
    assert again["dead_lettered"] == 0
    assert json.loads(site.cli("replay", "--json").stdout)["replayed"] == 0
    time.sleep(1.5)
    assert site.texts(conversation) == expected


def test_a_sweep_beside_heavy_capture_loses_and_duplicates_nothing(
    site: Site,
) -> None:
    conversations = [f"c-heavy-{i}" for i in range(4)]
    runs_each = 50
    #: captures go on past runs_each until a sweep has compacted beside them (coalesced hints
    #: make 200 captures take well under a second, less than a first delivery can)
    max_runs = 2000
    site.worker(concurrency=2)
    site.beat(MEMHONCHO_SWEEP_INTERVAL_S="0.5")
    done = threading.Event()
    compacted = threading.Event()
    sweeps: list[int] = []
    errors: list[BaseException] = []
    captured: dict[str, int] = {}

    with Host(site.config_dir, site.data_dir) as host:

        def capture(mine: list[str]) -> None:
            try:
                n = 0
                while n < runs_each or (not compacted.is_set() and n < max_runs):
                    for conversation in mine:
                        assert host.capture(run(conversation, n)).status == "captured"
                    n += 1
                captured.update(dict.fromkeys(mine, n))
            except BaseException as exc:  # reported below
                errors.append(exc)

        def sweep_loop() -> None:
            while not done.is_set():
                report = sweep(site.deployment, host.enqueue_delivery)
                sweeps.append(report.dropped_delivered)
                if report.dropped_delivered:
                    compacted.set()

        sweeper = threading.Thread(target=sweep_loop)
        writers = [threading.Thread(target=capture, args=(conversations[i::2],)) for i in range(2)]
        sweeper.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        done.set()
        sweeper.join()
    assert errors == []
    assert len(sweeps) > 1 and sum(sweeps) > 0  # sweeps compacted while capture ran
    for conversation in conversations:
        expected = expected_texts(conversation, range(captured[conversation]))
        wait_until(lambda c=conversation, e=expected: site.texts(c) == e, conversation)
    final = sweep(site.deployment, lambda cid: True)
    assert final.pending == 0 and final.dead_lettered == 0
    for conversation in conversations:
        assert site.outbox_batches(conversation) == []
        outbox_ids = site.outbox_ids(conversation)
        assert len(outbox_ids) == len(set(outbox_ids)) == 2 * captured[conversation]


def test_sections_come_from_the_cache_refreshed_on_first_delivery_idle_and_beat(
    site: Site,
) -> None:
    conversation = "c-memory"
    site.settings(broker_url=site.redis, representation_ttl_s=2)
    cache = site.deployment.layout.cache(ids.conversation_key(conversation))
    site.worker()
    with Host(site.config_dir, site.data_dir) as host:
        assert host.sections(conversation).status is SectionsStatus.MISSING
        host.capture(run(conversation, 0))
        wait_until(cache.exists, "the first delivery's refresh")  # no beat is running yet
        assert host.sections(conversation).status is SectionsStatus.FRESH
        client = adapter.write_client(site.deployment.honcho_target())
        adapter.create_conclusion(client, "agent", ids.peer_id(OWNER), "Ana runs marathons")
        assert host.conversation_idle(conversation)
        wait_until(
            lambda: "marathons" in host.sections(conversation).text("long-term-memory"),
            "the refresh on idle",
        )
        cache.write_bytes(b'{"conversation_id": "c-mem')  # torn by something outside memhoncho
        broken = host.sections(conversation)
        assert broken.status is SectionsStatus.CORRUPT and broken.render() == ""
        site.beat()
        wait_until(
            lambda: host.sections(conversation).status is not SectionsStatus.CORRUPT,
            "beat's refresh of the corrupt cache",
        )
        fetched = host.sections(conversation).fetched_at
        wait_until(
            lambda: (host.sections(conversation).fetched_at or 0) > (fetched or 0),
            "beat's refresh of a stale snapshot",
        )
        assert "marathons" in host.sections(conversation).text("long-term-memory")
