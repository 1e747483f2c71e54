"""RabbitMQ as the broker: recall through a real worker answers over the PostgreSQL store's
results, the status view reads the queue depths over AMQP, doctor checks the broker it is
given, and a broker that is down is a typed error at once. Each test has a virtual host of
its own on the machine's RabbitMQ (``testing/rabbitmq.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.errors import HonchoUnavailable
from memhoncho.recall import tools
from memhoncho.status.view import queues_bucket
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin, write_api_key, write_settings
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import CeleryProcess
from memhoncho.testing.rabbitmq import private_vhost
from memhoncho.testing.runs import run_event
from memhoncho.testing.seed import seed_conversation
from memhoncho.worker import broker_check, routing
from memhoncho.worker import remote_recall as remote
from memhoncho.worker.app import create_app
from memhoncho.worker.queue_depths import amqp_depths

KEY = "sk-rabbitmq-edge-key"
ANA = "ana@example.com"
pytestmark = [pytest.mark.slow, pytest.mark.standin(llm=True, api_key=KEY)]


@pytest.fixture
def amqp_url() -> Iterator[str]:
    with private_vhost() as url:
        yield url


@pytest.fixture
def settings(
    config_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    amqp_url: str,
    postgres_url: str,
) -> dict[str, Any]:
    return point_at_standin(
        config_dir, standin, workspace_id, KEY, broker_url=amqp_url, store_url=postgres_url
    )


def test_recall_through_a_worker_answers_typed_and_remember_is_stored(
    host: Host, deployment: Deployment, celery_process: Callable[..., CeleryProcess]
) -> None:
    seed_conversation(deployment, "ana-run", ANA, ["rabbit words"])
    celery_process("worker", queues=[routing.RECALL_QUEUE], concurrency=1)

    found = host.call_tool(tools.SEARCH, {"query": "rabbit"}, owner=ANA, via="celery")
    remembered = host.call_tool(
        tools.REMEMBER, {"content": "likes rabbits"}, owner=ANA, via="celery"
    )

    assert [r["text"] for r in found["results"]] == ["rabbit words"]
    assert remembered["remembered"] is True
    # The search's answer was read and forgotten; the remember's stays (with its claim) to
    # answer the caller's retries until it expires (results/once.py).
    remember_id = remote.task_id_for(tools.REMEMBER, {"content": "likes rabbits"}, ANA)
    store = deployment.store()
    with store.connection() as conn:  # type: ignore[attr-defined]
        left = conn.execute("SELECT key FROM memhoncho_celery_results").fetchall()
    assert left and all(str(remember_id) in key for (key,) in left), left


def test_a_recall_with_rabbitmq_down_is_a_typed_error_within_the_tool_timeout(
    config_dir: Path, data_dir: Path, settings: dict[str, Any]
) -> None:
    down = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    write_settings(config_dir, **{**settings, "broker_url": down}, tool_timeout_s=3.0)
    with Host(config_dir, data_dir) as host:
        started = time.monotonic()
        with pytest.raises(HonchoUnavailable) as caught:
            host.call_tool(tools.SEARCH, {"query": "x"}, owner=ANA, via="celery")
        elapsed = time.monotonic() - started
    assert caught.value.code == "ERR_HONCHO_UNAVAILABLE"
    assert elapsed < 3.0 + 1.0


def test_the_status_view_reads_queue_depths_from_rabbitmq(
    host: Host, deployment: Deployment, amqp_url: str
) -> None:
    for conversation in ("c-1", "c-2", "c-3"):  # no worker: the hints wait in their queues
        assert host.capture(run_event(conversation, 0, ANA)).enqueued
    host.close()
    current = deployment.settings()
    bucket = queues_bucket(deployment, current)
    assert bucket["broker"] == "rabbitmq", bucket
    assert bucket["total"] == 3
    queue = routing.deliver_queue("c-1", current.partitions)
    assert (
        amqp_depths(amqp_url, [queue, "memhoncho.never-declared"])["memhoncho.never-declared"] == 0
    )


def test_doctor_checks_the_rabbitmq_broker_and_where_recall_answers(
    config_dir: Path, deployment: Deployment, settings: dict[str, Any]
) -> None:
    app = create_app(deployment)
    try:
        verdict = broker_check.check(app)
    finally:
        app.close()
    assert verdict.ok and "rabbitmq" in verdict.detail and "store" in verdict.detail, verdict

    down = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    write_settings(config_dir, **{**settings, "broker_url": down})
    app = create_app(Deployment(config_dir, deployment.data_dir))
    try:
        verdict = broker_check.check(app, timeout_s=1.0)
    finally:
        app.close()
    assert not verdict.ok and "unreachable" in verdict.detail


def test_a_nul_character_is_refused_at_validation_on_both_stores(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    from memhoncho.errors import InvalidEvent, InvalidId

    write_settings(config_dir, store_url=store_url)
    write_api_key(config_dir, KEY)
    with Host(config_dir, data_dir) as host:
        for field in ("text", "run_id", "owner"):
            run = run_event("nul-chat", 0, ANA)
            if field == "text":
                run["inputs"][0]["text"] = "a\x00b"
            else:
                run[field] = "x\x00y"
            if field == "owner":  # an id: the one character rule of every id (ids.py)
                with pytest.raises(InvalidId) as refused:
                    host.capture(run)
                assert "control or unassigned character" in refused.value.message
                continue
            with pytest.raises(InvalidEvent) as caught:
                host.capture(run)
            assert caught.value.code == "ERR_INVALID_EVENT" and "U+0000" in caught.value.message
        store = host.deployment.store()
        assert store.conversation_keys() == []  # nothing written, on either store
