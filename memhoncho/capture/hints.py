"""Delivery hints published beside the capture's fsync rather than after it.

A capture writes its line under the outbox lock, then fsyncs. The hint's broker round trip
does not need the fsync to have finished: a worker reads the outbox under that same lock, so
it sees the line only once the fsync is done and the lock released. So a small thread pool
publishes while the capturing thread fsyncs, and the capture waits for the publish before it
returns, so ``enqueued`` still says what happened. A hint that goes out for a line whose fsync
then fails is harmless: hints are level-triggered ("this conversation may have work").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any

from memhoncho.capture import hint_push
from memhoncho.worker import routing

if TYPE_CHECKING:
    from celery import Celery

_NO_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
KEPT_CONNECTIONS = 4  # publishes at once on kept connections (hint_threads.HINT_THREADS)
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

    It publishes on up to ``KEPT_CONNECTIONS`` producers of its own, each on its own connection,
    kept between publishes (a plain list: the producer pool's acquire and release, two kombu
    pools and the producer revived on a fresh channel, cost 30-40 us of a 0.2 ms publish on the
    2-core machine). With as many publishes already in flight it uses the app's pool. A kept
    connection is dropped at its first error (the next publish opens a new one); ``close``
    closes the rest.

    On Redis, ``push`` writes the same message straight onto the queue's list on a connection
    kept for it, for the capture to read the reply after its fsync (``hint_push``); each
    publish through kombu that succeeds keeps one more such connection, up to as many.
    """

    def __init__(self, app: Celery, deployment_id: str | None = None) -> None:
        """``deployment_id``: the identity each hint carries (``Deployment.hint_identity``), so
        a worker of another deployment says so (``worker/foreign.py``)."""
        self._app = app
        self._kwargs = {"deployment_id": deployment_id} if deployment_id else {}
        # The app's own router decides the partition count, as it would for send_task.
        router = next(r for r in app.conf.task_routes if isinstance(r, routing.Router))
        self._partitions = router.partitions
        self._delivery_mode = app.conf.task_default_delivery_mode
        self._pid = -1
        self._headers: dict[str, Any] = {}
        self._wire = functools.lru_cache(maxsize=WIRE_CACHE)(self._build_wire)
        self._templates = functools.lru_cache(maxsize=WIRE_CACHE)(self._build_template)
        self._kept_pid = os.getpid()
        self._kept_lock = threading.Lock()
        self._idle: list[Any] = []  # kept producers not publishing now
        self._kept = 0  # kept producers of this process, publishing or idle
        self._closed = False
        self._pushers = hint_push.Pushers(KEPT_CONNECTIONS)

    def _fixed_headers(self) -> dict[str, Any]:
        """The headers every deliver message shares (``origin`` names this process)."""
        if self._pid != os.getpid():
            template = self._app.amqp.as_task_v2(
                "", routing.DELIVER_TASK, kwargs=self._kwargs, ignore_result=True
            )
            self._headers, self._pid = dict(template.headers), os.getpid()
        return self._headers

    def _build_wire(self, conversation_id: str) -> tuple[Any, str, bytes]:
        """The conversation's queue, the repr of the task's arguments and the message body."""
        from celery.utils.saferepr import saferepr

        args = [conversation_id]
        queue = self._app.amqp.queues[routing.deliver_queue(conversation_id, self._partitions)]
        argsrepr = saferepr(args, self._app.amqp.argsrepr_maxsize)
        return queue, argsrepr, json.dumps([args, self._kwargs, _NO_EMBED]).encode("utf-8")

    def _build_template(self, conversation_id: str, pid: int) -> str:
        """The conversation's message as kombu's Redis transport stores it (``hint_push``),
        in this process (``pid``: the ``origin`` header names it)."""
        queue, argsrepr, body = self._wire(conversation_id)
        headers = {**self._fixed_headers(), "argsrepr": argsrepr}
        delivery_mode = queue.exchange.delivery_mode or self._delivery_mode
        return hint_push.envelope_template(queue.name, body, headers, delivery_mode)

    def push(self, conversation_id: str) -> hint_push.Push | None:
        """The hint's LPUSH written now on a kept Redis connection, for its ``reply`` to be
        read once the capture's fsync is done (``hint_push``); None where it cannot be (not on
        Redis, no idle kept connection yet): ``publish`` then. Raises what the socket raised."""
        if not self._pushers.idle():  # not on Redis, or every kept connection is pushing
            return None
        queue = self._wire(conversation_id)[0]
        task_id = str(uuid.uuid4())
        template = self._templates(conversation_id, os.getpid())
        return self._pushers.push(
            queue, hint_push.envelope(template, task_id, self._app.thread_oid)
        )

    def publish(self, conversation_id: str) -> None:
        """One delivery hint for the conversation; raises what the broker raised."""
        queue, argsrepr, body = self._wire(conversation_id)
        task_id = str(uuid.uuid4())
        headers = {**self._fixed_headers(), "id": task_id, "root_id": task_id, "argsrepr": argsrepr}
        producer = self._take()
        if producer is None:
            with self._app.producer_pool.acquire(block=True) as pooled:
                self._send(pooled, queue, body, task_id, headers)
            return
        try:
            self._send(producer, queue, body, task_id, headers)
        except Exception:
            self._drop(producer)
            raise
        self._pushers.add_from(producer.channel)  # the next hints are pushed (hint_push)
        self._give_back(producer)

    def _send(self, producer: Any, queue: Any, body: bytes, task_id: str, headers: Any) -> None:
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

    def _take(self) -> Any:
        """An idle kept producer, a new one (connected at its first publish) while fewer than
        ``KEPT_CONNECTIONS`` exist, else None."""
        if self._kept_pid != os.getpid():  # forked: the parent's connections are not ours
            self._kept_pid, self._kept_lock = os.getpid(), threading.Lock()
            self._idle, self._kept = [], 0
        with self._kept_lock:
            if self._idle:
                return self._idle.pop()
            if self._kept >= KEPT_CONNECTIONS or self._closed:
                return None
            self._kept += 1
        try:
            from kombu import Producer

            return Producer(self._app.connection_for_write())
        except BaseException:
            with self._kept_lock:
                self._kept -= 1
            raise

    def _give_back(self, producer: Any) -> None:
        with self._kept_lock:
            if not self._closed and self._kept_pid == os.getpid():
                self._idle.append(producer)
                return
        self._drop(producer, failed=False)

    def _drop(self, producer: Any, *, failed: bool = True) -> None:
        """Forget a kept producer and close its connection: one that failed without a word on
        the wire (it may be dead), a healthy one as a connection is closed."""
        with self._kept_lock:
            self._kept -= 1
        with contextlib.suppress(Exception):
            if failed:
                producer.connection.collect()
            else:
                producer.connection.close()

    def close(self) -> None:
        """Close the kept connections (a producer still publishing is closed when it is done)."""
        with self._kept_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for producer in idle:
            self._drop(producer, failed=False)
        self._pushers.close()
