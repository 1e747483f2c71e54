"""A delivery hint is the very message Celery's ``send_task`` publishes (hints.DeliverPublisher),
so any worker consumes it alike; only the ids that are new per message differ."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
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


def _hint(publisher: Any, conversation_id: str, how: str) -> None:
    if how == "published":
        publisher.publish(conversation_id)
        return
    pushed = publisher.push(conversation_id)  # the LPUSH written beside the fsync (hint_push)
    assert pushed is not None
    pushed.reply()


@pytest.mark.parametrize("how", ["published", "pushed"])
def test_a_delivery_hint_is_the_message_send_task_publishes(
    config_dir: Path, data_dir: Path, redis_url: str, how: str
) -> None:
    write_settings(config_dir, broker_url=redis_url)
    write_api_key(config_dir, "k")
    client = redis.Redis.from_url(redis_url)
    with Host(config_dir, data_dir) as host:
        app, publisher = host._sender.client()
        publisher.publish("first")  # a publish through kombu makes the kept Redis connection
        client.delete(routing.deliver_queue("first", PARTITIONS))
        for conversation_id in CONVERSATIONS:
            app.send_task(  # the hint carries the deployment's identity (worker/foreign.py)
                routing.DELIVER_TASK,
                args=[conversation_id],
                kwargs={"deployment_id": host.deployment.hint_identity()},
                retry=False,
                ignore_result=True,
            )
            _hint(publisher, conversation_id, how)
            queue = routing.deliver_queue(conversation_id, PARTITIONS)
            ours, celerys = client.lpop(queue), client.lpop(queue)  # lpush: newest first
            assert ours is not None and celerys is not None
            assert _normalized(ours) == _normalized(celerys)
            for field in ("headers", "properties"):  # the task id, and the delivery tag
                unique = "id" if field == "headers" else "delivery_tag"
                assert json.loads(ours)[field][unique] != json.loads(celerys)[field][unique]
    client.close()
