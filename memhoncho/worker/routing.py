"""The wire names (tasks, queues, Redis keys) and the one place that decides a task's queue.

Hosts, workers and beats of different versions meet only through these names, so each is
written here once. A stable hash (crc32, never ``hash()``, which is salted per process) of the
conversation id picks one of N partition queues, so one conversation's deliveries queue together.
"""

from __future__ import annotations

import zlib
from typing import Any

# A broker's kind is a fact of its URL, read below this edge too (results, status): kept there.
from memhoncho.settings.values import is_amqp as is_amqp
from memhoncho.settings.values import is_redis as is_redis

TASK_PREFIX = "memhoncho."  #: every memhoncho task's name starts so (results record only these)
DELIVER_TASK = "memhoncho.deliver"
RECALL_TASK = "memhoncho.recall"
SWEEP_TASK = "memhoncho.outbox_sweep"
REFRESH_ALL_TASK = "memhoncho.refresh_representations"  #: enqueues the refreshes that are due
REFRESH_TASK = "memhoncho.refresh_representation"  #: one conversation's

DELIVER_QUEUE_PREFIX = "memhoncho.deliver."
RECALL_QUEUE = "memhoncho.recall"
MAINTENANCE_QUEUE = "memhoncho.maintenance"


def partition(conversation_id: str, partitions: int) -> int:
    return zlib.crc32(conversation_id.encode("utf-8")) % partitions


def deliver_queue(conversation_id: str, partitions: int) -> str:
    return f"{DELIVER_QUEUE_PREFIX}{partition(conversation_id, partitions)}"


def deliver_queues(partitions: int) -> list[str]:
    return [f"{DELIVER_QUEUE_PREFIX}{i}" for i in range(partitions)]


def all_queues(partitions: int) -> list[str]:
    """Every queue of the app: the deliver partitions, recall and maintenance."""
    return [*deliver_queues(partitions), RECALL_QUEUE, MAINTENANCE_QUEUE]


DELIVER = "deliver"  # routed by conversation partition
#: every memhoncho task's wire name and where it goes; a guard test checks each task is here
TASK_QUEUES: dict[str, str] = {
    DELIVER_TASK: DELIVER,
    SWEEP_TASK: MAINTENANCE_QUEUE,
    REFRESH_ALL_TASK: MAINTENANCE_QUEUE,
    REFRESH_TASK: MAINTENANCE_QUEUE,
    RECALL_TASK: RECALL_QUEUE,
}


class Router:
    """Celery ``task_routes`` entry: deliveries by partition, the rest by name."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
    ) -> dict[str, str] | None:
        queue = TASK_QUEUES.get(name)
        if queue == DELIVER:
            conversation_id = (list(args or []) or [None])[0]
            if conversation_id is None:
                conversation_id = (kwargs or {}).get("conversation_id")
            return {"queue": deliver_queue(str(conversation_id), self.partitions)}
        return {"queue": queue} if queue else None
