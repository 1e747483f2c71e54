"""The host's side of memhoncho: capture every settled run durably, then hint a worker.

``Host.capture`` validates the run, builds its batch (pure), appends it to the conversation's
outbox under the outbox lock and fsyncs, publishing ``memhoncho.deliver`` beside the fsync
(``hint_sender.py``) unless a hint for the conversation is still waiting
(store/hint_marks.py). A broker that is down or a missing API key cost nothing but the hint:
the relay or the sweep sends it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memhoncho import deployment as deployment_module
from memhoncho import ids
from memhoncho.capture import hint_word
from memhoncho.capture.hint_sender import HintSender
from memhoncho.capture.hint_threads import Hint, Pending, settled
from memhoncho.capture.record import build_record, is_selected, validate_run
from memhoncho.deployment import Deployment
from memhoncho.models import CaptureResult, CaptureStatus, HintOutcome, RunEvent
from memhoncho.privacy import redaction
from memhoncho.store import open_store
from memhoncho.store.redactions import add_redactions
from memhoncho.worker import routing

if TYPE_CHECKING:
    # Celery, kombu and honcho-ai load on first use (a hint, a recall), not with the host:
    # a process that only captures never pays for them.
    from celery import Celery

    from memhoncho.recall import tools as recall_tools
    from memhoncho.recall.memory import Sections

log = logging.getLogger(__name__)

DELIVER_TASK = routing.DELIVER_TASK
REFRESH_TASK = routing.REFRESH_TASK


class Host:
    """memhoncho inside an agent host. Thread-safe; one per process is enough."""

    def __init__(
        self,
        config_dir: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        hints: bool = True,
        init: bool | None = None,
        initialise: bool | None = None,
        inline_hints: bool = False,
    ) -> None:
        """``hints=False``: capture publishes nothing (a one-shot process that must not wait
        for a broker client to load); it leaves the outbox relay a request instead.
        ``inline_hints=True``: the hint is published on the capturing thread once the line is
        fsynced, not on a hint thread beside the fsync (``bench capture`` compares the two).

        The settings are checked first (``ConfigError``), then the data directory
        (``deployment.open_data_dir``): ``init=None`` creates only the default location on
        first use and refuses a named folder that is not initialised (``NotInitialised``,
        nothing created); True initialises it, False refuses it. ``initialise`` is the old
        name of ``init``."""
        self.deployment = Deployment.from_dirs(config_dir, data_dir)
        self.deployment.settings()  # ConfigError now: nothing runs under unread settings
        deployment_module.open_data_dir(
            self.deployment.data_dir, init if initialise is None else initialise
        )
        self._sender = HintSender(self.deployment, hinting=hints, inline=inline_hints)
        redaction.redactor()  # compile the default patterns now: the first capture pays none

    # ---- capture ------------------------------------------------------------------------

    def capture(self, event: Mapping[str, Any] | RunEvent) -> CaptureResult:
        """Make a settled run durable; returns once it is fsynced (or refused, changing nothing)."""
        run = validate_run(event)
        key = ids.conversation_key(run.conversation_id)
        if not is_selected(run.selection):
            return CaptureResult(status=CaptureStatus.NOT_SELECTED)
        current = self.deployment.settings()
        record = build_record(
            run,
            user_peer_id=ids.peer_id(run.owner),
            max_message_length=current.max_message_length,
            captured_at=time.time(),
            redactor=redaction.redactor(current.redact_patterns),
        )
        if record is None:
            return CaptureResult(status=CaptureStatus.EMPTY)
        hint: list[Hint] = []
        said: list[HintOutcome] = []  # what the sender decided
        # The files of the data dir, or the database of ``store_url`` (StoreUnavailable: down).
        store = open_store(self.deployment.data_dir, current.store_url, current.store_timeout_s)
        marks = store.kind == "files"
        # PostgreSQL claims the mark in the capture's own statement, and calls back only when
        # it did (no hint waits), when this host would publish; else it asks the relay to.
        sender = self._sender
        publishing = marks or (sender.hinting and sender.may_publish())
        try:
            appended = store.append(  # CaptureTooLarge past max_batch_bytes, encoded once
                key,
                record,
                max_pending=current.max_pending_batches,
                max_bytes=current.max_batch_bytes,
                # The hint is published while the line is fsynced (see hints.py), unless one is
                # already waiting for this conversation (store/hint_marks.py).
                after_write=(
                    (lambda: hint.append(sender.soon(run.conversation_id, key, marks, said)))
                    if publishing
                    else None
                ),
            )
        except BaseException:
            if hint and not isinstance(hint[0], Pending):  # a hint thread ends its own
                settled(hint[0])  # the publish begun is ended (its connection released)
            raise
        if appended.duplicate:
            return CaptureResult(status=CaptureStatus.DUPLICATE, batch_id=record["batch_id"])
        # No callback from a store that claimed nothing: the hint waiting covers the record.
        enqueued = settled(hint[0]) if hint else (publishing and not marks)
        outcome = said[0] if said else sender.unsent(publishing, appended.relayed)
        outcome = hint_word.confirmed(outcome, enqueued)
        redactions = int(record.get("redactions", 0))
        if redactions:
            self._count_redactions(redactions)
        return CaptureResult(
            status=CaptureStatus.CAPTURED,
            batch_id=record["batch_id"],
            enqueued=enqueued,
            hint=outcome,
            redactions=redactions,
        )

    def _count_redactions(self, count: int) -> None:
        """Add to the status view's counter; the capture itself is already durable."""
        try:
            add_redactions(self.deployment.layout, count)
        except OSError as exc:
            log.warning(
                "redaction counter not updated",
                extra={"action": "redaction_count_failed", "error": type(exc).__name__},
            )

    # ---- hints to workers ---------------------------------------------------------------
    def celery(self) -> Celery:
        """The host's Celery client (fails fast on a broker that is down)."""
        return self._sender.client()[0]

    def enqueue_delivery(self, conversation_id: str) -> bool:
        """Publish a delivery hint; False (at once) when there is no key or no broker."""
        return self._sender.enqueue(DELIVER_TASK, conversation_id)

    @property
    def hints_published(self) -> int:
        """Delivery hints this host published (a coalesced capture publishes none)."""
        return self._sender.hints_published

    # ---- memory in the prompt -----------------------------------------------------------

    def conversation_idle(self, conversation_id: str) -> bool:
        """The conversation went quiet: refresh its cached memory (a hint; False if not sent)."""
        return self._enqueue_refresh(conversation_id)

    def conversation_archived(self, conversation_id: str) -> bool:
        """The conversation was archived: refresh its cached memory one last time."""
        return self._enqueue_refresh(conversation_id)

    def _enqueue_refresh(self, conversation_id: str) -> bool:
        ids.conversation_key(conversation_id)  # InvalidId before anything is sent
        return self._sender.enqueue(REFRESH_TASK, conversation_id)

    def sections(self, conversation_id: str) -> Sections:
        """The prompt sections from the stored snapshot (``memory.Sections``): never calls
        Honcho, never raises (a file on the file store, one indexed row on PostgreSQL)."""
        from memhoncho.recall import memory

        return memory.sections(self.deployment, conversation_id)

    # ---- recall tools -------------------------------------------------------------------

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The recall tools' schemas, in the function-calling format model APIs accept."""
        from memhoncho.recall import tools as recall_tools

        return recall_tools.tool_definitions()

    def tools(self, owner: str | None, *, via: str = "process") -> recall_tools.UserTools:
        """The recall tools bound to ``owner``: the model never picks whose memory it reads."""
        from memhoncho.recall import tools as recall_tools

        return recall_tools.UserTools(
            lambda name, arguments: self.call_tool(name, arguments, owner=owner, via=via)
        )

    def call_tool(
        self, name: str, arguments: Any, *, owner: str | None, via: str = "process"
    ) -> dict[str, Any]:
        """Run a model's tool call for ``owner``, here (``process``) or on a recall worker."""
        from memhoncho.recall import tools as recall_tools
        from memhoncho.worker import remote_recall

        if via == "celery":
            return remote_recall.call_via_celery(
                self.celery(), self.deployment, name, arguments, owner
            )
        if via != "process":
            raise ValueError(f"via must be 'process' or 'celery', not {via!r}")
        return recall_tools.call_tool(self.deployment, name, arguments, owner)

    # ---- departures ---------------------------------------------------------------------

    def user_deleted(self, owner: str | None, purge: bool = False) -> dict[str, Any]:
        """Record that ``owner`` left; ``purge=True`` also removes their local pending data."""
        from memhoncho.upkeep import departures

        return departures.user_deleted(self.deployment, owner, purge=purge).as_dict()

    # ---- forks --------------------------------------------------------------------------

    def conversation_forked(self, parent_id: str, child_id: str, at_entry: int) -> None:
        """Record that ``child_id`` forked from ``parent_id`` at ``at_entry``: one fsynced file.

        No network call; the child's first delivery resolves it. ForkRefused when the child
        already has a fork record or a Honcho session, InvalidId / InvalidInput for bad ids or
        a bad ``at_entry``; a refusal changes nothing.
        """
        from memhoncho.delivery import forks

        forks.fork_conversation(self.deployment, parent_id, child_id, at_entry)

    # ---- shutdown -----------------------------------------------------------------------

    def close(self, timeout: float = 25) -> None:
        """Finish in-flight publishes (up to ``timeout`` seconds) and release the broker pool."""
        self._sender.close(timeout)

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
