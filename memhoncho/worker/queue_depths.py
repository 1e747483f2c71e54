"""How many messages wait in each of the deployment's queues, asked of the broker itself.

Two readers need it: the status view's ``queues`` bucket, and the stranded look
(``store/stranded.py``), which must tell a hint that waits behind a backlog from one that is
lost. Each broker is asked in its own terms, with a short timeout, so a broker that is down
answers with an exception the caller turns into "unknown", never a hang:
- Redis: ``LLEN`` of each queue's list and of kombu's priority lists, in one pipeline;
- RabbitMQ: a passive ``queue.declare`` per queue (AMQP itself; no management plugin);
- the embedded broker: the ``.msg`` files of kombu's filesystem transport.
"""

from __future__ import annotations

import os
from pathlib import Path

from memhoncho.deployment import Deployment
from memhoncho.settings import Settings, values
from memhoncho.worker import routing

BROKER_TIMEOUT_S = 0.5  # seconds; a Redis that is down answers "unknown", not a hang
AMQP_TIMEOUT_S = 2.0  # seconds to connect to RabbitMQ before "unreachable"
REDIS_PRIORITY_SEP = "\x06\x16"  # kombu's Redis transport: queue key of priority n is q+sep+n
REDIS_PRIORITY_STEPS = (0, 3, 6, 9)


class DepthsUnknown(Exception):
    """The broker's kind has no depth reader (the reason is the message)."""


def redis_depths(url: str, names: list[str]) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(
        url, socket_connect_timeout=BROKER_TIMEOUT_S, socket_timeout=BROKER_TIMEOUT_S
    )
    try:
        pipe = client.pipeline(transaction=False)
        for name in names:
            for pri in REDIS_PRIORITY_STEPS:
                pipe.llen(f"{name}{REDIS_PRIORITY_SEP}{pri}" if pri else name)
        sizes = pipe.execute()
    finally:
        client.close()
    steps = len(REDIS_PRIORITY_STEPS)
    return {name: sum(sizes[i * steps : (i + 1) * steps]) for i, name in enumerate(names)}


def amqp_depths(url: str, names: list[str], timeout_s: float = AMQP_TIMEOUT_S) -> dict[str, int]:
    """Each queue's ready messages by a passive ``queue.declare``; a queue not declared yet
    (no worker or host used it) holds 0."""
    import kombu

    depths: dict[str, int] = {}
    with kombu.Connection(
        url, connect_timeout=timeout_s, transport_options={"max_retries": 0}
    ) as conn:
        conn.ensure_connection(max_retries=1)
        channel = conn.channel()
        for name in names:
            try:
                depths[name] = int(channel.queue_declare(name, passive=True).message_count)
            except conn.channel_errors:  # 404: not declared; the server closed the channel
                depths[name] = 0
                channel = conn.channel()
    return depths


def filesystem_depths(queue_dir: Path, names: list[str]) -> dict[str, int]:
    """kombu's filesystem transport names a message ``<ms>_<uuid>.<queue>.msg``; a folder not
    made yet (nothing was ever published) holds nothing."""
    depths = dict.fromkeys(names, 0)
    try:
        entries = os.scandir(queue_dir)
    except FileNotFoundError:
        return depths
    with entries:
        for entry in entries:
            queue = entry.name.partition(".")[2]
            if queue.endswith(".msg") and queue[:-4] in depths:
                depths[queue[:-4]] += 1
    return depths


def read(deployment: Deployment, current: Settings, names: list[str]) -> dict[str, int]:
    """The depth of each of ``names``; DepthsUnknown for a broker without a reader, and the
    broker's own error when it cannot be reached."""
    kind = values.broker_kind(current.broker_url)
    url = current.broker_url
    if kind == "redis" and url is not None:
        return redis_depths(url, names)
    if kind == "rabbitmq" and url is not None:
        return amqp_depths(url, names)
    if kind == "embedded":
        return filesystem_depths(deployment.layout.broker_dir / "queue", names)
    raise DepthsUnknown(f"queue depths are not read from a {kind} broker")


class BusyQueues:
    """``busy(conversation_id)``: whether the conversation's delivery queue holds messages.

    The broker is asked once, at the first question (a look with nothing stale asks
    nothing), and the answer kept for this look. A broker that cannot tell makes every queue
    idle: a mark is then presumed lost after ``hint_marks.STALE_S``, as without this."""

    def __init__(
        self, deployment: Deployment, current: Settings, depths: dict[str, int] | None = None
    ) -> None:
        """``depths``: the queues' depths already read (the status view's ``queues`` bucket),
        so the broker is not asked twice."""
        self.deployment = deployment
        self.current = current
        self._depths = depths

    def __call__(self, conversation_id: str) -> bool:
        if self._depths is None:
            names = routing.deliver_queues(self.current.partitions)
            try:
                self._depths = read(self.deployment, self.current, names)
            except Exception:  # noqa: BLE001 - unknown: presume idle, as before this existed
                self._depths = {}
        queue = routing.deliver_queue(conversation_id, self.current.partitions)
        return self._depths.get(queue, 0) > 0
