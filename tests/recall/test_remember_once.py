"""A remember through a worker is stored once, however often its caller retries it: one after
the other, or at the same time; on Redis (file store) and on RabbitMQ (PostgreSQL store)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memhoncho.capture.host import Host
from memhoncho.errors import HonchoTimeout
from memhoncho.recall import tools
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin, write_settings
from memhoncho.testing.processes import CeleryProcess
from memhoncho.testing.rabbitmq import private_vhost
from memhoncho.worker import routing

KEY = "sk-remember-once-key"
ANA = "ana@example.com"
RETRIES = 4  # calls of one remember at the same time
FAST_TIMEOUT_S = 0.5  # seconds: the caller's wait while no recall worker runs
pytestmark = [pytest.mark.slow, pytest.mark.standin(llm=True, api_key=KEY)]


@pytest.fixture(params=["redis", "amqp"])
def settings(
    request: pytest.FixtureRequest, config_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> Iterator[dict[str, Any]]:
    if request.param == "redis":
        yield point_at_standin(
            config_dir, standin, workspace_id, KEY, broker_url=request.getfixturevalue("redis_url")
        )
        return
    with private_vhost() as amqp_url:
        yield point_at_standin(
            config_dir,
            standin,
            workspace_id,
            KEY,
            broker_url=amqp_url,
            store_url=request.getfixturevalue("postgres_url"),
        )


def _stored(standin: HonchoStandIn, workspace_id: str) -> int:
    return len(standin.conclusions(workspace_id))


def test_a_remember_retried_one_after_another_or_at_once_is_stored_once(
    host: Host,
    standin: HonchoStandIn,
    workspace_id: str,
    celery_process: Callable[..., CeleryProcess],
) -> None:
    celery_process("worker", queues=[routing.RECALL_QUEUE], concurrency=2)

    def remember(content: str) -> dict[str, Any]:
        return host.call_tool(tools.REMEMBER, {"content": content}, owner=ANA, via="celery")

    first = remember("likes tea")
    again = remember("likes tea")  # the caller's retry
    assert again == first and _stored(standin, workspace_id) == 1

    # Retried while the first attempt still runs: the retries wait for it, none stores again.
    standin.faults.add("latency_ms", latency_ms=1500, count=1, path_contains="/conclusions")
    with ThreadPoolExecutor(RETRIES) as pool:
        answers = list(pool.map(lambda _: remember("likes coffee"), range(RETRIES)))
    assert all(a == answers[0] for a in answers) and answers[0]["remembered"]
    assert _stored(standin, workspace_id) == 2

    other = host.call_tool(tools.REMEMBER, {"content": "likes tea"}, owner="bo", via="celery")
    assert other["conclusion_id"] != first["conclusion_id"] and _stored(standin, workspace_id) == 3


def test_a_remember_whose_first_attempt_waited_past_its_caller_is_stored_once_on_retry(
    host: Host,
    config_dir: Path,
    settings: dict[str, Any],
    standin: HonchoStandIn,
    workspace_id: str,
    celery_process: Callable[..., CeleryProcess],
) -> None:
    """No recall worker while the caller waits: it gets an unclear timeout. The worker that
    starts later must neither drop that attempt as expired nor refuse the retry (same task id)
    as revoked: Celery remembers a revoked id for hours, so a remember never expires."""
    write_settings(config_dir, **settings, tool_timeout_s=FAST_TIMEOUT_S)

    def remember() -> dict[str, Any]:
        return host.call_tool(tools.REMEMBER, {"content": "likes tea"}, owner=ANA, via="celery")

    with pytest.raises(HonchoTimeout) as caught:
        remember()
    assert caught.value.details["unclear"]
    celery_process("worker", queues=[routing.RECALL_QUEUE], concurrency=1)

    answer = remember()  # the caller's retry, once a worker runs

    assert answer["remembered"] and _stored(standin, workspace_id) == 1
    assert remember() == answer and _stored(standin, workspace_id) == 1
