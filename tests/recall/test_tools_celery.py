"""Recall tools through a real Celery worker on the ``memhoncho.recall`` queue, over real Redis."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import celery_support
import pytest
import redis

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoNoLLM,
    HonchoRateLimited,
    HonchoTimeout,
    HonchoUnavailable,
    InvalidToolCall,
    MemhonchoError,
)
from memhoncho.recall import tools
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.seed import seed_conversation
from memhoncho.worker import remote_recall as remote
from memhoncho.worker import routing

SECRET_KEY = "sk-memhoncho-recall-SECRET-77aa11"
ANA = "ana@example.com"
BOB = "bob@example.com"
FAST_TIMEOUT_S = 0.5  # seconds: the worker's Honcho timeout in the timeout test
FAULT_SLEEP_S = 1.5  # seconds a timeout fault holds a request: past FAST_TIMEOUT_S
BACKED_UP_DELIVERIES = 50  # delivery hints waiting, unconsumed, while recall runs
CONCURRENT_USERS = 6  # host threads calling recall at once, one user each
CONCURRENT_CALLS = 36  # recalls in all, spread over those users
pytestmark = [pytest.mark.slow, pytest.mark.standin(llm=True, api_key=SECRET_KEY)]


settings = celery_support.settings_fixture(SECRET_KEY)  # fixtures
recall_worker = celery_support.recall_worker


def call(host: Host, name: str, arguments: Any, owner: str | None) -> dict[str, Any]:
    return host.call_tool(name, arguments, owner=owner, via="celery")


def test_each_tool_answers_through_a_recall_worker_for_the_calling_user_only(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    recall_worker: None,
) -> None:
    seed_conversation(
        deployment, "ana-run", ANA, ["my marathon knee hurts"], ["marathon knee: rest"]
    )
    seed_conversation(deployment, "bob-run", BOB, ["bob's marathon knee is fine"])

    found = call(host, tools.SEARCH, {"query": "marathon knee"}, ANA)
    assert [r["text"] for r in found["results"]] == ["my marathon knee hurts"]
    assert found["results"][0]["conversation_id"] == "ana-run"
    bob = host.tools(BOB, via="celery").honcho_search("marathon knee")
    assert [r["text"] for r in bob["results"]] == ["bob's marathon knee is fine"]

    user_level = call(host, tools.REMEMBER, {"content": "Ana likes tea."}, ANA)
    in_conversation = call(
        host, tools.REMEMBER, {"content": "Ana's knee hurts.", "conversation_id": "ana-run"}, ANA
    )
    assert user_level["scope"] == "user"
    assert in_conversation["scope"] == "conversation"
    stored = {c["id"]: c for c in standin.conclusions(workspace_id)}
    assert stored[user_level["conclusion_id"]]["session_id"] is None
    assert stored[in_conversation["conclusion_id"]]["session_id"] == ids.session_id(
        workspace_id, "ana-run"
    )
    foreign = call(host, tools.REMEMBER, {"content": "x", "conversation_id": "bob-run"}, ANA)
    assert foreign["scope"] == "user"

    answer = call(
        host, tools.CHAT, '{"query": "What about the knee?", "reasoning_level": "low"}', ANA
    )
    assert "Ana's knee hurts." in answer["answer"]
    assert "Ana's knee" not in call(host, tools.CHAT, {"query": "knee?"}, BOB)["answer"]


def test_concurrent_recalls_of_many_users_each_get_only_their_own_words(
    host: Host, deployment: Deployment, recall_worker: None
) -> None:
    users = [f"user-{i}@example.com" for i in range(CONCURRENT_USERS)]
    for i, user in enumerate(users):
        seed_conversation(deployment, f"run-{i}", user, [f"shared words from {i}"])

    def search(i: int) -> list[str]:
        found = call(host, tools.SEARCH, {"query": "shared words"}, users[i % len(users)])
        return [r["text"] for r in found["results"]]

    with ThreadPoolExecutor(CONCURRENT_USERS) as pool:
        answers = list(pool.map(search, range(CONCURRENT_CALLS)))

    for i, texts in enumerate(answers):
        assert texts == [f"shared words from {i % len(users)}"]


def test_failures_come_back_from_the_worker_as_the_same_typed_errors(
    host: Host,
    standin: HonchoStandIn,
    config_dir: Path,
    settings: dict[str, Any],
    recall_worker: None,
) -> None:
    standin.llm = False
    with pytest.raises(HonchoNoLLM) as no_llm:
        call(host, tools.CHAT, {"query": "anything?"}, ANA)
    standin.llm = True

    standin.faults.add("http_503", path_contains="/search")
    with pytest.raises(HonchoUnavailable) as down:
        call(host, tools.SEARCH, {"query": "x"}, ANA)

    standin.faults.add("http_429", path_contains="/conclusions", retry_after_s=4)
    with pytest.raises(HonchoRateLimited) as limited:
        call(host, tools.REMEMBER, {"content": "x"}, ANA)
    assert limited.value.retry_after_s == 4

    write_settings(config_dir, **settings, tool_timeout_s=FAST_TIMEOUT_S)
    standin.faults.add("timeout_before_commit", path_contains="/search", sleep_s=FAULT_SLEEP_S)
    with pytest.raises(HonchoTimeout) as slow:
        call(host, tools.SEARCH, {"query": "x"}, ANA)

    for caught in (no_llm, down, limited, slow):
        error: MemhonchoError = caught.value
        assert error.message.startswith("memhoncho")
        assert SECRET_KEY not in str(error) + json.dumps(error.as_dict())


def test_a_bad_call_is_refused_by_the_host_before_anything_is_enqueued(
    host: Host, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        for name, arguments in (
            (tools.SEARCH, {"query": ""}),
            (tools.SEARCH, {"query": "x", "owner": BOB}),
            ("honcho_unknown", {}),
        ):
            with pytest.raises(InvalidToolCall):
                call(host, name, arguments, ANA)
        assert client.llen(routing.RECALL_QUEUE) == 0
    finally:
        client.close()


def test_a_recall_completes_while_deliveries_are_backed_up(
    host: Host, deployment: Deployment, redis_url: str, recall_worker: None
) -> None:
    seed_conversation(deployment, "ana-run", ANA, ["backlog words"])
    app = host.celery()
    for i in range(BACKED_UP_DELIVERIES):
        app.send_task("memhoncho.deliver", args=[f"conversation-{i}"], ignore_result=True)
    client = redis.Redis.from_url(redis_url)
    try:
        queues = routing.deliver_queues(deployment.settings().partitions)
        waiting = sum(client.llen(q) for q in queues)
        assert waiting == BACKED_UP_DELIVERIES

        found = call(host, tools.SEARCH, {"query": "backlog"}, ANA)

        assert found["count"] == 1
        assert sum(client.llen(q) for q in queues) == BACKED_UP_DELIVERIES  # still all waiting
    finally:
        client.close()


def test_a_recall_no_worker_answers_is_a_honcho_timeout_and_expires_unstarted(
    host: Host, config_dir: Path, settings: dict[str, Any], redis_url: str
) -> None:
    write_settings(config_dir, **settings, tool_timeout_s=FAST_TIMEOUT_S)

    with pytest.raises(HonchoTimeout) as caught:
        call(host, tools.SEARCH, {"query": "x"}, ANA)

    assert caught.value.message.startswith("memhoncho")
    assert f"{FAST_TIMEOUT_S + remote.QUEUE_MARGIN_S:g} s" in caught.value.message
    client = redis.Redis.from_url(redis_url)
    try:
        (raw,) = client.lrange(routing.RECALL_QUEUE, 0, -1)
        assert json.loads(raw)["headers"]["expires"]  # a late worker drops it, never runs it
    finally:
        client.close()


def test_recall_works_through_the_embedded_broker_without_redis(
    config_dir: Path, data_dir: Path, standin: HonchoStandIn, workspace_id: str
) -> None:
    write_settings(config_dir, base_url=standin.url, workspace_id=workspace_id)
    write_api_key(config_dir, SECRET_KEY)
    deployment = Deployment(config_dir, data_dir)
    seed_conversation(deployment, "ana-run", ANA, ["embedded words"])
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    with (
        CeleryProcess("worker", env, queues=[routing.RECALL_QUEUE]),
        Host(config_dir, data_dir) as host,
    ):
        found = call(host, tools.SEARCH, {"query": "embedded"}, ANA)
        remembered = call(host, tools.REMEMBER, {"content": "x", "conversation_id": "ana-run"}, ANA)

    assert [r["text"] for r in found["results"]] == ["embedded words"]
    assert remembered["scope"] == "conversation"


def test_the_recall_bench_measures_every_tool_on_every_path() -> None:
    import argparse

    from memhoncho.bench import BENCHMARKS
    from memhoncho.bench import recall as bench

    assert BENCHMARKS["recall"] == bench.__name__
    figures = bench.run(argparse.Namespace(samples=2))

    redis = figures["paths"]["celery_redis"]  # the bench's own Redis: a private redis-server
    assert "skipped" in redis or set(redis) == {tools.SEARCH, tools.CHAT, tools.REMEMBER}
    for path in ("in_process", "celery_embedded_broker"):
        assert set(figures["paths"][path]) == {tools.SEARCH, tools.CHAT, tools.REMEMBER}
        for tool in figures["paths"][path].values():
            assert tool["p50_ms"] > 0
