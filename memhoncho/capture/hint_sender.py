"""The host's publisher of hints to workers: a delivery hint beside each capture's fsync.

``HintSender.soon`` runs inside the outbox append, once the line is written (``after_write``):
it decides whether this capture publishes (no hint waits: ``store/hint_marks.py``) and begins
the publish, pushed on Redis (``hint_push.py``) or on a hint thread (``hint_threads.py``), for
the capture to settle once the line is fsynced. A broker that is down or a missing API key
cost nothing but the hint: the relay or the sweep sends it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from memhoncho.capture import hint_word
from memhoncho.capture.hint_push import Push
from memhoncho.capture.hint_threads import Hint, HintPool
from memhoncho.capture.hints import DeliverPublisher
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError
from memhoncho.models import HintOutcome
from memhoncho.store import counters, hint_marks
from memhoncho.worker import routing

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

BROKER_BACKOFF_S = 5.0  # after a failed publish, skip publishing this long (no retry loop)
DELIVER_TASK = routing.DELIVER_TASK


class HintSender:
    """One host's hints: its Celery client, publishes in flight, and the broker's backoff."""

    def __init__(self, deployment: Deployment, *, hinting: bool, inline: bool) -> None:
        """``hinting`` False: publish nothing, leave the outbox relay a request; ``inline``:
        publish on the capturing thread once the line is fsynced (``Host``'s ``inline_hints``)."""
        self.deployment = deployment
        self.hinting = hinting
        self._inline_hints = inline
        self._app: Celery | None = None
        self._deliver: DeliverPublisher | None = None
        self._app_lock = threading.Lock()
        self._broker_down_until = 0.0
        self._in_flight = 0
        self._idle = threading.Condition()
        self._closed = False
        self._hints = HintPool()
        self._owed: dict[tuple[str, str], None] = {}  # requests to publish again (ordered)
        self._failures_logged: set[str] = set()  # causes logged once (with their traceback)
        #: delivery hints published (a coalesced capture publishes none)
        self.hints_published = 0

    def client(self) -> tuple[Celery, DeliverPublisher]:
        """The Celery client and the publisher of delivery hints on it, built together."""
        with self._app_lock:
            if self._app is None or self._deliver is None:
                from memhoncho.celery_app import create_app

                self._app = create_app(self.deployment, role="host")
                # A "task-sent" event is a second broker publish on every capture; workers
                # still report received/started/succeeded to Flower.
                self._app.conf.task_send_sent_event = False
                # Import the transport now (no connection is made), not on the first capture.
                self._app.connection_for_write().transport  # noqa: B018
                self._deliver = DeliverPublisher(self._app, self.deployment.hint_identity())
            return self._app, self._deliver

    def enqueue(self, task: str, conversation_id: str) -> bool:
        """Publish ``task`` for the conversation now; False (at once) when there is no key.

        Unlike a capture's hint, nothing re-drives such a request from the outbox, so it is
        tried even while the broker is known down, and one that fails is owed: published
        again after the next publish that succeeds (``_pay_owed``)."""
        if self._closed or self.deployment.api_key() is None:
            return False
        if task == DELIVER_TASK and time.monotonic() < self._broker_down_until:
            return False  # the relay and the sweep re-drive a delivery hint
        sent = self._publish(task, [conversation_id])
        if sent:
            self._pay_owed()
        elif task != DELIVER_TASK:
            self._owe(task, conversation_id)
        return sent

    def soon(
        self,
        conversation_id: str,
        key: str,
        marks: bool = True,
        said: list[HintOutcome] | None = None,
    ) -> Hint:
        """Begin publishing a delivery hint (``_start``). True when a hint already waiting
        will see the line just written (nothing to publish), False when none is to be sent;
        what was decided is appended to ``said``.

        ``marks`` False (the PostgreSQL store): the store claimed the mark (its ``hint_at``
        column) in the capture's own statement, so this capture publishes.
        """
        tell = (said if said is not None else []).append
        if self._closed or self.deployment.api_key() is None:
            tell(HintOutcome.NO_KEY)
            return False
        if not marks:
            release = partial(self._release_pg_mark, key, conversation_id)
            if time.monotonic() < self._broker_down_until:
                release()
                tell(HintOutcome.BROKER_DOWN)
                return False
            self._begin_publish()  # counted now, so close() waits for it
            tell(HintOutcome.PUBLISHED)
            return self._start(conversation_id, release)
        if not self.hinting:  # the outbox relay publishes, unless a hint already waits
            if hint_marks.claim(self.deployment.layout, key):
                hint_marks.request_relay(self.deployment.layout, key, conversation_id)
                tell(HintOutcome.RELAY)
            else:
                tell(HintOutcome.WAITING)
            return False
        if time.monotonic() < self._broker_down_until:
            tell(HintOutcome.BROKER_DOWN)
            return False
        if not hint_marks.claim(self.deployment.layout, key):
            tell(HintOutcome.WAITING)
            return True
        self._begin_publish()  # counted now, so close() waits for it
        tell(HintOutcome.PUBLISHED)
        release = partial(hint_marks.release, self.deployment.layout, key)
        return self._start(conversation_id, release)

    def _start(self, conversation_id: str, release: Callable[[], None]) -> Hint:
        """The hint's publish, begun beside the fsync: on Redis its LPUSH written now and its
        reply read once the line is fsynced (``hint_push``), else on a hint thread. With
        ``inline_hints``, published by the capture once the line is fsynced."""
        send = partial(self._send_hint, conversation_id, release)
        if self._inline_hints:
            return send
        publisher = self._deliver  # built by a first hint on a hint thread, not under the lock
        pushed = None
        if publisher is not None:
            try:
                pushed = publisher.push(conversation_id)
            except Exception:  # its kept connection is dropped: a hint thread publishes anew
                pushed = None
        if pushed is None:
            return self._hints.submit(send)
        return partial(self._send_hint, conversation_id, release, pushed)

    def unsent(self, publishing: bool, relayed: bool = False) -> HintOutcome:
        """What became of the hint of a PostgreSQL capture that published none."""
        keyed = not self._closed and self.deployment.api_key() is not None
        return hint_word.unsent(
            publishing=publishing, hinting=self.hinting, relayed=relayed, keyed=keyed
        )

    def may_publish(self) -> bool:
        """Whether a capture now would publish a hint (a key, a broker not known down)."""
        if self._closed or self.deployment.api_key() is None:
            return False
        return time.monotonic() >= self._broker_down_until

    def _release_pg_mark(self, key: str, conversation_id: str) -> None:
        """No hint waits after all: the next capture publishes, and the outbox relay is asked
        to (it tries again at every look until the broker answers)."""
        try:
            self.deployment.store().release_hint(key, conversation_id)
        except MemhonchoError:
            pass  # a mark left behind ages out after hint_marks.STALE_S

    def _send_hint(
        self, conversation_id: str, release: Callable[[], None], pushed: Push | None = None
    ) -> bool:
        """Publish the hint whose mark was claimed (or read the reply to its ``pushed`` LPUSH);
        ``release`` that mark when it failed."""
        sent = self._send(DELIVER_TASK, [conversation_id], pushed)
        if sent:
            with self._idle:
                self.hints_published += 1
            if self._owed:
                self._pay_owed()
        else:  # no hint waits after all: the next capture must publish one
            release()
        return sent

    def _publish(self, task: str, args: list[Any]) -> bool:
        self._begin_publish()
        return self._send(task, args)

    def _begin_publish(self) -> None:
        with self._idle:
            self._in_flight += 1

    def _send(self, task: str, args: list[Any], pushed: Push | None = None) -> bool:
        """Publish once (no retry loop); ends the publish ``_begin_publish`` counted."""
        try:
            if task == DELIVER_TASK:  # on every capture that publishes: the fast path
                self._deliver_hint(args[0], pushed)
            else:
                self.client()[0].send_task(task, args=args, retry=False, ignore_result=True)
        except Exception as exc:
            if broker_unreachable(exc):  # weather: the relay and the sweep re-drive the work
                self._broker_down_until = time.monotonic() + BROKER_BACKOFF_S
                log.warning(
                    "delivery hint not published; the sweep will enqueue it",
                    extra={"action": "enqueue_failed", "error": type(exc).__name__},
                )
            else:  # an import error or a bug: no backoff, and the person must see it
                self._count_failure(exc)
            return False
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()
        return True

    def _count_failure(self, exc: Exception) -> None:
        """Log a hint that failed for a reason other than the broker (its cause once, with
        the traceback) and count it for the status view (``hints.failed``)."""
        cause = f"{type(exc).__name__}: {exc}"
        first = cause not in self._failures_logged
        self._failures_logged.add(cause)
        log.error(
            "delivery hint failed (not a broker outage); the relay and the sweep re-drive it",
            exc_info=exc if first else None,
            extra={"action": "hint_failed", "error": type(exc).__name__},
        )
        try:
            counters.add_one(self.deployment.layout, counters.HINT_FAILURES, cause)
        except MemhonchoError:
            pass  # a full disk: the log line above is what is left

    def _owe(self, task: str, conversation_id: str) -> None:
        with self._idle:
            self._owed[(task, conversation_id)] = None

    def _pay_owed(self) -> None:
        """Publish again the requests that failed before, now that a publish went through."""
        while self._owed and not self._closed:
            with self._idle:
                if not self._owed:
                    return
                task, conversation_id = next(iter(self._owed))
                del self._owed[(task, conversation_id)]
            if not self._publish(task, [conversation_id]):
                self._owe(task, conversation_id)
                return

    def _deliver_hint(self, conversation_id: str, pushed: Push | None) -> None:
        """Read the reply to a pushed LPUSH, or publish; raises what the broker raised."""
        if pushed is not None:
            try:
                pushed.reply()
                return
            except Exception:  # a kept connection the broker had closed: publish anew, once
                pass
        self.client()[1].publish(conversation_id)

    def close(self, timeout: float) -> None:
        """Finish in-flight publishes (up to ``timeout`` seconds) and release the broker pool."""
        self._closed = True
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight and time.monotonic() < deadline:
                self._idle.wait(max(0.0, deadline - time.monotonic()))
        if not self._in_flight:
            self._hints.shutdown()  # idle threads only; a stuck publish is not waited on
        with self._app_lock:
            if self._app is not None:
                from memhoncho.celery_app import close_app

                if self._deliver is not None:
                    self._deliver.close()
                close_app(self._app)
                self._app = None
                self._deliver = None


def broker_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker could not be reached or refused the publish (weather:
    back off), rather than memhoncho or its install being wrong (an import error, a bug).

    Each library's errors are looked up only where that library is loaded already: a publish
    that raised one of them has loaded it."""
    if isinstance(exc, OSError | TimeoutError):  # refused, reset, timed out; a full disk
        return True
    for module, name in (
        ("kombu.exceptions", "KombuError"),
        ("redis.exceptions", "RedisError"),
        ("amqp.exceptions", "AMQPError"),
    ):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, getattr(loaded, name)):
            return True
    return False
