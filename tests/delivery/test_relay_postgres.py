"""The outbox relay on the PostgreSQL store: captures that publish no hint (the broker down, no
key yet, ``memhoncho capture``) leave their request in the database, and the relay of any
machine publishes it at its next look, not the sweep 15 minutes later; while a hint waits,
nothing asks again. First the relay's scan against a recording publisher, then real processes
(a ``memhoncho relay`` and a ``celery worker``) with the broker behind a TCP proxy of the
test's own, cut and brought back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.capture.relay import Relay
from memhoncho.models import HintOutcome
from memhoncho.store import open_store
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.proxy import TcpProxy
from memhoncho.testing.relay import PublishRecorder, RelayProcess
from memhoncho.testing.runs import expected_texts, run_event

KEY = "sk-relay-postgres-key"
OWNER = "ana@example.com"
#: seconds from the broker's return until the records captured while it was down are in Honcho:
#: the host's broker backoff (5 s), a reconnect and a delivery; the sweep would be 15 minutes
RECOVERY_S = 15.0
POLL_S = 0.1  # seconds between looks at the stand-in


def _requests(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT key FROM memhoncho_relay_requests ORDER BY key").fetchall()
    return [row[0] for row in rows]


@pytest.fixture
def on_postgres(config_dir: Path, postgres_url: str) -> str:
    # A broker nobody listens on: a publish fails at once.
    write_settings(config_dir, store_url=postgres_url, broker_url="redis://127.0.0.1:9/0")
    write_api_key(config_dir, KEY)
    return postgres_url


def test_a_capture_that_publishes_nothing_leaves_the_database_a_request_the_relay_publishes(
    on_postgres: str, config_dir: Path, data_dir: Path
) -> None:
    with Host(config_dir, data_dir, hints=False) as quiet:
        recorder = PublishRecorder()
        relay = Relay(quiet.deployment, recorder)
        assert relay.scan().published == 0  # nothing captured yet
        first = quiet.capture(run_event("conv-1", 0))
        assert (first.enqueued, first.hint) == (False, HintOutcome.RELAY)
        assert quiet.capture(run_event("conv-1", 1)).hint is HintOutcome.RELAY  # asked already
        assert _requests(on_postgres) == [ids.conversation_key("conv-1")]
        report = relay.scan()
        assert (report.requests, report.published) == (1, 1)
        assert recorder.published == ["conv-1"]
        # While that hint waits, captures ask nothing and the relay publishes nothing more.
        for i in range(2, 6):
            assert quiet.capture(run_event("conv-1", i)).hint is HintOutcome.WAITING
        assert _requests(on_postgres) == []
        assert relay.scan().published == 0 and recorder.published == ["conv-1"]
        # A delivery takes the mark: the next capture asks again.
        store: Any = open_store(data_dir, on_postgres)
        store.take_hint(ids.conversation_key("conv-1"))
        assert quiet.capture(run_event("conv-1", 6)).hint is HintOutcome.RELAY


def test_a_capture_with_the_broker_down_is_asked_of_the_relay_which_publishes_when_it_is_back(
    on_postgres: str, config_dir: Path, data_dir: Path
) -> None:
    with Host(config_dir, data_dir) as host:
        failed = host.capture(run_event("conv-1", 0))  # the publish fails: the mark released
        backoff = host.capture(run_event("conv-2", 0))  # the broker is known down: not tried
        assert (failed.hint, backoff.hint) == (HintOutcome.BROKER_DOWN, HintOutcome.BROKER_DOWN)
        keys = sorted(ids.conversation_key(c) for c in ("conv-1", "conv-2"))
        assert _requests(on_postgres) == keys
        recorder = PublishRecorder()
        recorder.fail = True
        relay = Relay(host.deployment, recorder)
        report = relay.scan()  # still down: one failure, both asked again
        assert (report.requests, report.published) == (2, 0)
        assert _requests(on_postgres) == keys
        recorder.fail = False
        assert relay.scan().published == 2
        assert sorted(recorder.published) == ["conv-1", "conv-2"]
        assert _requests(on_postgres) == [] and relay.scan().published == 0


# ---- real processes ---------------------------------------------------------------------------


def _held(standin: HonchoStandIn, workspace_id: str, name: str) -> list[str]:
    for session in standin.sessions(workspace_id):
        if session["id"] == ids.session_id(workspace_id, name):
            return [m["content"] for m in session["messages"]]
    return []


def _wait_held(
    standin: HonchoStandIn, workspace_id: str, runs: dict[str, int], timeout_s: float
) -> float:
    """Seconds until every conversation holds its ``runs`` in Honcho (or the time is up)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if all(
            len(_held(standin, workspace_id, name)) >= 2 * count for name, count in runs.items()
        ):
            break
        time.sleep(POLL_S)
    return time.monotonic() - started


def _hints_queued(redis_url: str) -> int:
    """Delivery hints waiting in the broker's partition queues."""
    client = redis.Redis.from_url(redis_url)
    try:
        return sum(int(client.llen(name)) for name in client.scan_iter("memhoncho.deliver.*"))
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.standin(api_key=KEY)
@pytest.mark.timeout(300)
def test_captures_made_while_the_broker_was_down_are_delivered_seconds_after_it_is_back(
    config_dir: Path,
    data_dir: Path,
    postgres_url: str,
    redis_url: str,
    standin: HonchoStandIn,
    workspace_id: str,
    standin_settings: Any,
) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(redis_url)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as broker:
        # The host and the relay reach the broker through the proxy; the worker directly, so
        # what is measured is the relay's part, not a worker's reconnect.
        standin_settings(broker_url=broker.url_for(redis_url), store_url=postgres_url)
        worker_env = memhoncho_env(
            config_dir=config_dir, data_dir=data_dir, broker_url=redis_url, api_key=None
        )
        runs = {"conv-down-1": 0, "conv-down-2": 0, "conv-quiet": 0}
        with RelayProcess(config_dir, data_dir):
            with CeleryProcess("worker", worker_env, concurrency=2):
                broker.down()
                with (
                    Host(config_dir, data_dir) as host,
                    Host(config_dir, data_dir, hints=False) as quiet,
                ):
                    for i in range(3):
                        for name in ("conv-down-1", "conv-down-2"):
                            outcome = host.capture(run_event(name, i, OWNER)).hint
                            assert outcome is HintOutcome.BROKER_DOWN
                            runs[name] += 1
                        quiet.capture(run_event("conv-quiet", i, OWNER))
                        runs["conv-quiet"] += 1
                    time.sleep(2.0)  # the relay tries, and fails, at every look
                    assert all(not _held(standin, workspace_id, name) for name in runs)
                    broker.up()
                    recovery_s = _wait_held(standin, workspace_id, runs, RECOVERY_S)
                print(f"delivered {recovery_s:.1f} s after the broker came back")
                for name, count in runs.items():
                    assert _held(standin, workspace_id, name) == expected_texts(name, count)
                assert recovery_s < RECOVERY_S
            # The worker is stopped: a hint published now waits in the broker, untaken.
            name = "conv-down-1"
            with (
                Host(config_dir, data_dir) as host,
                Host(config_dir, data_dir, hints=False) as quiet,
            ):
                outcomes = []
                for _ in range(12):
                    outcomes.append(host.capture(run_event(name, runs[name], OWNER)).hint)
                    runs[name] += 1
                    outcomes.append(quiet.capture(run_event(name, runs[name], OWNER)).hint)
                    runs[name] += 1
                time.sleep(1.0)  # four looks of the relay
                assert outcomes[0] is HintOutcome.PUBLISHED
                assert set(outcomes[1:]) == {HintOutcome.WAITING}, outcomes
                assert host.hints_published == 1
                assert _hints_queued(redis_url) == 1  # one hint, nothing asked of the relay
            with CeleryProcess("worker", worker_env, concurrency=2):
                _wait_held(standin, workspace_id, runs, 60.0)
                for name, count in runs.items():
                    assert _held(standin, workspace_id, name) == expected_texts(name, count)
