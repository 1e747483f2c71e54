"""A Redis delivery hint pushed by the capturing thread: the LPUSH is written before the fsync
and its reply read after it.

On Redis a hint thread (``hint_threads.py``) costs more than it hides: kombu's publish is
about 70 us of Python that contends for the GIL with the capture, and the hand-off is a thread
switch each way. Here the capturing thread writes the very command kombu's Redis transport
would send to a connection that has published before, fsyncs while the broker answers, then
reads the reply. The round trip hides behind the fsync, and no other thread runs.

The message is kombu's virtual-transport envelope (``Channel.prepare_message``, then
``_inplace_augment_message``: a base64 body, a new delivery tag, the anonymous exchange) around
Celery's protocol-2 message. ``tests/capture/test_deliver_publisher.py`` holds it equal to what
``send_task`` writes. It is used only where kombu's ``_put`` is one plain LPUSH onto the queue's
own key: a Redis channel without ``global_keyprefix``, a queue without expiry, priority 0.
Elsewhere (RabbitMQ, the embedded broker, a first hint) the hint threads publish through kombu.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import threading
import uuid
from typing import Any

#: stand-ins for the values each message gets anew, replaced in the built JSON (uuid4 hex: no
#: text of a conversation id or header can hold them by chance)
_TASK_ID = uuid.uuid4().hex
_REPLY_TO = uuid.uuid4().hex


def envelope_template(
    queue_name: str, body: bytes, headers: dict[str, Any], delivery_mode: int
) -> str:
    """The stored message as kombu writes it, with stand-ins for the task id (also the
    delivery tag: unique, as kombu's own) and the reply-to (``envelope`` fills them in)."""
    message = {
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {**headers, "id": _TASK_ID, "root_id": _TASK_ID},
        "properties": {
            "correlation_id": _TASK_ID,
            "reply_to": _REPLY_TO,
            "delivery_mode": delivery_mode,
            "delivery_info": {"exchange": "", "routing_key": queue_name},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": _TASK_ID,
        },
    }
    return json.dumps(message)  # kombu.utils.json.dumps: the default separators


def envelope(template: str, task_id: str, reply_to: str) -> str:
    return template.replace(_TASK_ID, task_id).replace(_REPLY_TO, reply_to)


class Pushers:
    """Up to ``kept`` Redis connections of this process kept for pushes.

    Each is made and connected after a publish through kombu succeeded (``add_from``, on a hint
    thread), with that channel's connection settings (TLS, password, timeouts), so a capture
    never connects under the outbox lock. One that fails is closed and forgotten; the next
    publish through kombu makes another. A forked child starts with none.
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._count = 0  # made and not lost: idle or pushing
        self._closed = False

    def add_from(self, channel: Any) -> None:
        """Keep one more connection like ``channel``'s, when it is a plain Redis channel.

        Only a channel of kombu's Redis transport, which is imported already when one exists:
        importing it for another broker's channel would need what only Redis needs."""
        kombu_redis = sys.modules.get("kombu.transport.redis")
        if kombu_redis is None:  # no Redis channel exists in this process
            return
        prefix: Any = getattr(channel, "global_keyprefix", None)  # keys kombu would rename
        if prefix or not isinstance(channel, kombu_redis.Channel):
            return
        with self._lock:
            self._reset_if_forked()
            if self._closed or self._count >= self._kept:
                return
            self._count += 1
        try:
            pool = channel.pool
            connection = pool.connection_class(**pool.connection_kwargs)
            connection.connect()
        except Exception:
            with self._lock:
                self._count -= 1
            return
        self._give_back(connection)

    def idle(self) -> bool:
        """Whether a push may find a kept connection now (``push`` looks again, locked)."""
        return bool(self._idle) and self._pid == os.getpid()

    def push(self, queue: Any, message: str) -> Push | None:
        """The LPUSH of ``message`` onto ``queue`` written now; None without an idle kept
        connection or for a queue kombu would not publish to with one LPUSH (an expiring
        one). Raises what the socket raised (the connection is closed and forgotten)."""
        if queue.expires is not None or (queue.queue_arguments or {}).get("x-expires"):
            return None
        with self._lock:
            self._reset_if_forked()
            if not self._idle:
                return None
            connection = self._idle.pop()
        try:
            connection.send_command("LPUSH", queue.name, message)
        except BaseException:
            self._lose(connection)
            raise
        return Push(self, connection)

    def _reset_if_forked(self) -> None:
        """In a forked child (under the lock): forget the parent's connections."""
        if self._pid != os.getpid():
            self._pid, self._idle, self._count = os.getpid(), [], 0

    def _give_back(self, connection: Any) -> None:
        with self._lock:
            if not self._closed and self._pid == os.getpid():
                self._idle.append(connection)
                return
        self._lose(connection)

    def _lose(self, connection: Any) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._count -= 1
        with contextlib.suppress(Exception):
            connection.disconnect()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            self._lose(connection)


class Push:
    """An LPUSH written on a kept connection, its reply not yet read."""

    __slots__ = ("_connection", "_pushers")

    def __init__(self, pushers: Pushers, connection: Any) -> None:
        self._pushers, self._connection = pushers, connection

    def reply(self) -> None:
        """Read the broker's answer; raises what it raised (the connection is then lost)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.read_response()
        except BaseException:
            self._pushers._lose(connection)
            raise
        self._pushers._give_back(connection)
