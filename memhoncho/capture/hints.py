"""Delivery hints published beside the capture's fsync rather than after it.

A capture writes its line under the outbox lock, then fsyncs. The hint's broker round trip
does not need the fsync to have finished: a worker reads the outbox under that same lock, so
it sees the line only once the fsync is done and the lock released. So a small thread pool
publishes while the capturing thread fsyncs, and the capture waits for the publish before it
returns, so ``enqueued`` still says what happened. A hint that goes out for a line whose fsync
then fails is harmless: hints are level-triggered ("this conversation may have work").
"""

from __future__ import annotations

import functools
import json
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from memhoncho.worker import routing

if TYPE_CHECKING:
    from celery import Celery

HINT_THREADS = 4  # publishes in flight at once (the host's broker pool holds 4 connections)
HINT_WAIT_S = 2.0  # at most this long for a publish (its own socket timeouts are shorter)


class HintPool:
    """A lazily started pool of publisher threads, restarted in a forked child."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, publish: Callable[[], bool]) -> Future[bool]:
        if self._pid != os.getpid():  # forked: the parent's threads do not exist here
            self._pid, self._lock, self._executor = os.getpid(), threading.Lock(), None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(HINT_THREADS, "memhoncho-hint")
            return self._executor.submit(publish)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)


def settled(hint: Future[bool] | bool | None) -> bool:
    """Whether the hint was published (or one already waiting covers the line); False for no
    hint, a failure or no answer in time."""
    if hint is None or isinstance(hint, bool):
        return bool(hint)
    try:
        return hint.result(timeout=HINT_WAIT_S)
    except FutureTimeout:
        return False


_NO_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
WIRE_CACHE = 4096  # conversations whose queue, argument repr and message body are kept built


class DeliverPublisher:
    """Publishes ``memhoncho.deliver`` as ``app.send_task`` does, without its general path.

    send_task spends about 0.35 ms of Python a call (option merging, the router, signals, the
    message built field by field, a declaration check that copies the queue) on every capture
    that publishes, as long as the publish it wraps. This publishes the same protocol-2 message
    through the same producer pool: the headers that never change are Celery's own
    (``as_task_v2``, once per process), the queue, argument repr and JSON body are built once
    per conversation, and each publish adds its task id. Like ``send_task_message`` it sends to
    the partition queue on the default exchange and declares the queue once per connection.
    """

    def __init__(self, app: Celery) -> None:
        self._app = app
        # The app's own router decides the partition count, as it would for send_task.
        router = next(r for r in app.conf.task_routes if isinstance(r, routing.Router))
        self._partitions = router.partitions
        self._delivery_mode = app.conf.task_default_delivery_mode
        self._pid = -1
        self._headers: dict[str, Any] = {}
        self._wire = functools.lru_cache(maxsize=WIRE_CACHE)(self._build_wire)

    def _fixed_headers(self) -> dict[str, Any]:
        """The headers every deliver message shares (``origin`` names this process)."""
        if self._pid != os.getpid():
            template = self._app.amqp.as_task_v2("", routing.DELIVER_TASK, ignore_result=True)
            self._headers, self._pid = dict(template.headers), os.getpid()
        return self._headers

    def _build_wire(self, conversation_id: str) -> tuple[Any, str, bytes]:
        """The conversation's queue, the repr of the task's arguments and the message body."""
        from celery.utils.saferepr import saferepr

        args = [conversation_id]
        queue = self._app.amqp.queues[routing.deliver_queue(conversation_id, self._partitions)]
        argsrepr = saferepr(args, self._app.amqp.argsrepr_maxsize)
        return queue, argsrepr, json.dumps([args, {}, _NO_EMBED]).encode("utf-8")

    def publish(self, conversation_id: str) -> None:
        """One delivery hint for the conversation; raises what the broker raised."""
        queue, argsrepr, body = self._wire(conversation_id)
        task_id = str(uuid.uuid4())
        headers = {**self._fixed_headers(), "id": task_id, "root_id": task_id, "argsrepr": argsrepr}
        with self._app.producer_pool.acquire(block=True) as producer:
            declared = producer.connection.declared_entities
            producer.publish(
                body,
                exchange="",
                routing_key=queue.name,
                content_type="application/json",
                content_encoding="utf-8",
                headers=headers,
                delivery_mode=queue.exchange.delivery_mode or self._delivery_mode,
                correlation_id=task_id,
                reply_to=self._app.thread_oid,
                retry=False,
                declare=None if hash(queue) in declared else [queue],
            )
