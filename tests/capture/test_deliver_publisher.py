"""A delivery hint is the very message Celery's ``send_task`` publishes (hints.DeliverPublisher),
so any worker consumes it alike; only the ids that are new per message differ."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import redis

from memhoncho.capture.host import Host
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.worker import routing

PARTITIONS = 8  # the settings' default
CONVERSATIONS = ["conv-a", "conv-é 'quoted'", "x" * 256]


def _normalized(raw: bytes) -> dict[str, Any]:
    """The stored message with its per-message ids replaced and its body decoded."""
    message = json.loads(raw)
    task_id = message["headers"]["id"]
    assert message["headers"]["root_id"] == task_id == message["properties"]["correlation_id"]
    for name in ("id", "root_id"):
        message["headers"][name] = "<task id>"
    message["properties"]["correlation_id"] = "<task id>"
    message["properties"]["delivery_tag"] = "<tag>"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def test_a_delivery_hint_is_the_message_send_task_publishes(
    config_dir: Path, data_dir: Path, redis_url: str
) -> None:
    write_settings(config_dir, broker_url=redis_url)
    write_api_key(config_dir, "k")
    client = redis.Redis.from_url(redis_url)
    with Host(config_dir, data_dir) as host:
        app, publisher = host._sender.client()
        for conversation_id in CONVERSATIONS:
            app.send_task(  # the hint carries the deployment's identity (worker/foreign.py)
                routing.DELIVER_TASK,
                args=[conversation_id],
                kwargs={"deployment_id": host.deployment.hint_identity()},
                retry=False,
                ignore_result=True,
            )
            publisher.publish(conversation_id)
            queue = routing.deliver_queue(conversation_id, PARTITIONS)
            ours, celerys = client.lpop(queue), client.lpop(queue)  # lpush: newest first
            assert ours is not None and celerys is not None
            assert _normalized(ours) == _normalized(celerys)
            assert json.loads(ours)["headers"]["id"] != json.loads(celerys)["headers"]["id"]
    client.close()


def test_a_pushed_hint_is_the_message_send_task_publishes(
    config_dir: Path, data_dir: Path, redis_url: str
) -> None:
    """The LPUSH written beside the fsync (``hint_push``) stores kombu's own envelope."""
    write_settings(config_dir, broker_url=redis_url)
    write_api_key(config_dir, "k")
    client = redis.Redis.from_url(redis_url)
    with Host(config_dir, data_dir) as host:
        app, publisher = host._sender.client()
        publisher.publish("first")  # a publish through kombu makes the kept connection
        for conversation_id in CONVERSATIONS:
            app.send_task(
                routing.DELIVER_TASK,
                args=[conversation_id],
                kwargs={"deployment_id": host.deployment.hint_identity()},
                retry=False,
                ignore_result=True,
            )
            pushed = publisher.push(conversation_id)
            assert pushed is not None
            pushed.reply()
            queue = routing.deliver_queue(conversation_id, PARTITIONS)
            ours, celerys = client.lpop(queue), client.lpop(queue)
            assert ours is not None and celerys is not None
            assert _normalized(ours) == _normalized(celerys)
            tags = {json.loads(raw)["properties"]["delivery_tag"] for raw in (ours, celerys)}
            assert len(tags) == 2
    client.close()
