"""What ``bench deliver`` needs to know of each broker: when its queues are idle, its name."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

from memhoncho.worker import routing

SETTLE_TIMEOUT_S = 300.0  # seconds to wait for the workers' queues to empty between arms


def kind_of(url: str | None) -> str:
    if routing.is_redis(url):
        return "redis"
    return "rabbitmq" if routing.is_amqp(url) else "embedded-filesystem"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def _waiting(broker_url: str | None, data_dir: Path, queues: list[str]) -> int:
    if routing.is_redis(broker_url):
        import redis

        assert broker_url is not None
        client = redis.Redis.from_url(broker_url)
        waiting = sum(int(client.llen(name)) for name in queues) + int(client.hlen("unacked"))
        client.close()
        return waiting
    if routing.is_amqp(broker_url):
        import kombu

        with kombu.Connection(broker_url, connect_timeout=5) as conn:
            channel = conn.channel()
            total = 0
            for name in queues:
                try:  # ready and unacknowledged both hold the workers
                    declared = channel.queue_declare(name, passive=True)
                    total += int(declared.message_count)
                except conn.channel_errors:
                    channel = conn.channel()
            return total
    folder = data_dir / "broker" / "queue"  # kombu's filesystem transport: a file per message
    return sum(1 for q in queues for _ in folder.glob(f"*.{q}.msg"))


def _wait_idle(broker_url: str | None, data_dir: Path, queues: list[str]) -> None:
    """Until no task waits on the workers' queues: the arm before leaves duplicate hints the
    next must not queue behind (each is a cheap no-op, but they share the workers)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if _waiting(broker_url, data_dir, queues) == 0:
            return
        time.sleep(0.1)
