"""Delivery: get a conversation's pending outbox records into Honcho, in order, exactly once.

``deliver_conversation`` is level-triggered ("this conversation may have pending records"), so
a duplicate or late call is harmless. Under the conversation lock it reads the ledger and the
pending records, establishes the Honcho session if the ledger has none (a pending fork first),
then sends every pending message coalesced, up to 100 a call.

Exactly once: before each call the ledger names the outbox ids in flight and when the send
began; every message carries its outbox id in metadata. A failed call keeps the mark unless it
proves nothing was stored (a 400 or 422, or a send that never reached Honcho: refused, or no
connection made), and the next attempt, once the fence has opened (the
send can no longer land, ``fence.py``), asks Honcho which of those it holds and sends only the
rest. Before that it hands back (``InFlightSettling``, with the wait). Failures are raised for
the caller to retry (``adapter.classify``) or give up; the records stay pending either way, and
the sweep re-drives them.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from memhoncho import ids
from memhoncho.delivery import fence, forks
from memhoncho.delivery.fold import Pending, created_at, fold, pending_messages
from memhoncho.delivery.report import DeliveryReport, DeliveryState, joined
from memhoncho.deployment import Deployment
from memhoncho.errors import HonchoFailure, LockBusy, MemhonchoError
from memhoncho.honcho import adapter
from memhoncho.models import AGENT, OUTBOX_ID_KEY, Ledger
from memhoncho.settings import Settings
from memhoncho.store import parked
from memhoncho.store.base import Record

if TYPE_CHECKING:
    from honcho import Honcho

log = logging.getLogger(__name__)

MAX_MESSAGES_PER_CALL = adapter.MAX_MESSAGES_PER_CALL  # Honcho's limit per add_messages
#: calls one delivery makes at most before handing back (``more``), so a large backlog never
#: holds a worker near the task time limit and other conversations get their turn
MAX_CALLS_PER_RUN = 50


def deliver_conversation(
    deployment: Deployment, conversation_id: str, *, max_calls: int = MAX_CALLS_PER_RUN
) -> DeliveryReport:
    """Deliver what is pending for ``conversation_id``; LockBusy if another worker is at it.

    Raises the memhoncho error of a failed Honcho call (after recording it in the ledger),
    MissingApiKey when there is work but no key, ForkWaiting while a fork's parent lags,
    InFlightSettling (with ``wait_s``) while an earlier send may still land.
    """
    key = ids.conversation_key(conversation_id)
    report, delivered_seq = _locked_run(deployment, conversation_id, key, max_calls)
    # A record captured after the run's last look published its hint while the lock was held:
    # that hint met the lock and waits for a retry (about half a second). Look once more now
    # that the lock is free and deliver it at once; a worker that took the lock meanwhile has it.
    while (
        report.state == DeliveryState.DELIVERED
        and report.calls < max_calls
        and deployment.store().newest_seq(key) > delivered_seq
    ):
        try:
            more, delivered_seq = _locked_run(
                deployment, conversation_id, key, max_calls - report.calls
            )
        except LockBusy:
            break
        report = joined(report, more)
        if not (more.delivered_messages or more.recovered_messages):
            break  # nothing it could send: the next hint or the sweep looks again
    return report


def _locked_run(
    deployment: Deployment, conversation_id: str, key: str, max_calls: int
) -> tuple[DeliveryReport, int]:
    """One run under the conversation's lock: its report and the ledger's delivered seq."""
    with deployment.store().conversation_lock(key, timeout_s=0):
        # Before the outbox is read: a capture from now on hints again (store/hint_marks.py).
        deployment.store().take_hint(key)
        run = _Delivery(deployment, conversation_id, key)
        report = run.run(max_calls)
        parked.unpark(deployment.layout, key)  # it ended well (a failure raised)
        return report, run.ledger.delivered_seq


def failures_in_a_row(deployment: Deployment, conversation_id: str) -> int:
    """Honcho failures the ledger counts since a message was last delivered (0 when it cannot
    be read): what the task's retry-or-give-up decision counts."""
    try:
        ledger = deployment.store().read_ledger(ids.conversation_key(conversation_id))
    except MemhonchoError:
        return 0
    return ledger.failures if ledger else 0


class _Delivery:
    """One run of the engine for one conversation, under its lock."""

    def __init__(self, deployment: Deployment, conversation_id: str, key: str) -> None:
        self.deployment = deployment
        self.store = deployment.store()
        self.conversation_id = conversation_id
        self.key = key
        self.report = DeliveryReport(conversation_id)
        self.ledger = Ledger(conversation_id=conversation_id)
        self.settings: Settings = deployment.settings()
        self.records: list[Record] = []
        #: peers this run knows the session is configured for (the agent always is)
        self.ensured_peers: set[str] = {self.settings.agent_peer_id}
        #: the ledger holds what the file does not yet (a session id written with the first mark)
        self.unsaved = False

    def run(self, max_calls: int) -> DeliveryReport:
        self.ledger = self.store.read_ledger(self.key) or self.ledger
        self.report.session_id = self.ledger.session_id
        if not self.ledger.in_flight and self._nothing_past(self.ledger.delivered_seq):
            return self.report  # the common duplicate hint: two line reads, no parse
        self.records = self.store.pending(self.key, self.ledger.delivered_seq)
        if not self.records and not self.ledger.in_flight:
            return self.report
        if self.ledger.in_flight:
            self._fence()  # before any call: nothing is read or sent while the send may land
        client = adapter.write_client(self.deployment.honcho_target())  # MissingApiKey: no key
        first = self.ledger.messages_delivered == 0
        try:
            self._establish(client)
            if self.ledger.in_flight:
                self._reconcile(client)
            self._send(client, max_calls)
            self._send_newer(client, max_calls)
        except MemhonchoError as exc:
            self._record_failure(exc)
            raise
        if self.report.delivered_messages or self.report.recovered_messages:
            self.report.first_delivery = first
            self._mark_last_delivery()
        return self.report

    def _send_newer(self, client: Honcho, max_calls: int) -> None:
        """Records captured while this ran: their hints met the lock and wait for a retry,
        so deliver them now, within the budget, and the retries find nothing to do."""
        while self.report.state == DeliveryState.DELIVERED and self.report.calls < max_calls:
            if self._nothing_past(self.ledger.delivered_seq):
                return
            before = self.ledger.messages_delivered
            self.records = self.store.pending(self.key, self.ledger.delivered_seq)
            self._send(client, max_calls)
            if self.ledger.messages_delivered == before:
                return

    def _nothing_past(self, delivered_seq: int) -> bool:
        """The outbox's newest record is delivered (a cheap look: two line reads, one query)."""
        return self.store.newest_seq(self.key) <= delivered_seq

    # ---- session --------------------------------------------------------------------

    def _establish(self, client: Honcho) -> None:
        """Give the ledger a Honcho session: the fork's clone, else a fresh one, configured."""
        if self.ledger.session_id is not None:
            self.ensured_peers.add(ids.peer_id(self.ledger.owner))
            return
        head = self.records[0] if self.records else {}
        owner = head.get("owner", self.ledger.owner)
        if self.store.has_pending_fork(self.key):
            # The fork module's own Honcho calls are not counted in ``report.calls``.
            self.ledger = forks.resolve_pending_fork(
                self.deployment, client, self.key, self.conversation_id, self.ledger
            )
        sid = self.ledger.session_id or ids.session_id(
            self.settings.workspace_id, self.conversation_id
        )
        user_peer = head.get("user_peer_id") or ids.peer_id(owner)
        # Before the first message: Honcho ignores a config given after it (HONCHO.md).
        # A new session's metadata from its first run; a fork's clone keeps its parent's.
        cloned = self.ledger.session_id is not None
        metadata = None if cloned else head.get("session_metadata") or None
        self.report.calls += adapter.ensure_session(
            client, sid, user_peer, self.settings.agent_peer_id, metadata
        )
        self.ensured_peers.add(user_peer)
        self.ledger = self.ledger.model_copy(update={"session_id": sid, "owner": owner})
        # A derived id lost in a crash is derived again (the get-or-create finds the session):
        # it is written with the first in-flight mark, one write less. A clone's is random.
        self.unsaved = True
        if cloned:
            self._save()
        self.report.session_id = sid
        log.info(
            "honcho session established",
            extra={"action": "session_established", "conversation_key": self.key},
        )

    def _ensure_peer(self, client: Honcho, user_peer: str) -> bool:
        """A user peer this session has not been configured for (an owner changed): True
        when that took calls."""
        if user_peer in self.ensured_peers:
            return False
        assert self.ledger.session_id is not None
        self.report.calls += adapter.ensure_session(
            client, self.ledger.session_id, user_peer, self.settings.agent_peer_id
        )
        self.ensured_peers.add(user_peer)
        return True

    # ---- exactly once ---------------------------------------------------------------

    def _fence(self) -> None:
        """InFlightSettling while the open mark's send may still land in Honcho.

        A mark of unknown start (a ledger from before starts were recorded) is fenced from
        now: its send began before this lock was taken, so it cannot be later than that.
        """
        since = self.ledger.in_flight_since
        if since is None:
            since = time.time()
            self.ledger = self.ledger.model_copy(update={"in_flight_since": since})
            self._save()
        fence.check(since, self.settings, "an earlier send of this conversation")

    def _reconcile(self, client: Honcho) -> None:
        """An open in-flight mark: learn which of its ids Honcho holds, fold them, clear it."""
        assert self.ledger.session_id is not None
        found = adapter.find_outbox_ids(
            client, self.ledger.session_id, OUTBOX_ID_KEY, self.ledger.in_flight
        )
        self.report.calls += 1 + (len(self.ledger.in_flight) - 1) // adapter.FILTER_CHUNK
        before = self.ledger.messages_delivered
        self.ledger = self._folded(dict(found)).model_copy(
            update={"in_flight": [], "in_flight_since": None}
        )
        self._save()
        self.report.recovered_messages += self.ledger.messages_delivered - before
        log.info(
            "in-flight send reconciled",
            extra={
                "action": "in_flight_reconciled",
                "conversation_key": self.key,
                "held": len(found),
            },
        )

    def _send(self, client: Honcho, max_calls: int) -> None:
        todo = pending_messages(self.ledger, self.records)
        chunks = [
            todo[i : i + MAX_MESSAGES_PER_CALL] for i in range(0, len(todo), MAX_MESSAGES_PER_CALL)
        ]
        if not chunks:
            self.report.state = DeliveryState.DELIVERED
            self._write_if_error_cleared()
            return
        budget = max(1, max_calls - self.report.calls)
        sending, rest = chunks[:budget], chunks[budget:]
        assert self.ledger.session_id is not None
        sid = self.ledger.session_id
        # One write per call: the mark of the next chunk goes with the outcome of the last,
        # stamped with its start; a peer setup between them (calls that may take a client
        # timeout each) restamps it, so the fence always counts from the send itself.
        self._write_mark(sending[0], last_error=None)
        for index, chunk in enumerate(sending):
            try:
                ensured = [self._ensure_peer(client, self._author(item)) for item in chunk]
            except MemhonchoError:
                self._clear_mark()  # the chunk's send never began
                raise
            if any(ensured):
                self._write_mark(chunk)
            self.report.calls += 1
            assert self.ledger.in_flight_since is not None
            try:
                # over by the mark's start + the timeout, the moment the fence counts from
                with adapter.send_by(self.ledger.in_flight_since + self.settings.honcho_timeout_s):
                    honcho_ids = adapter.add_messages(
                        client, sid, [self._outgoing(p) for p in chunk]
                    )
            except MemhonchoError as exc:
                # Only a refusal, or a send that never reached Honcho (retry.py's table),
                # proves nothing was stored; any other failure (a 429 or a 5xx too) keeps
                # the mark for a fenced reconcile before anything is resent.
                if adapter.proves_nothing_stored(exc):
                    self._clear_mark()
                raise
            following = sending[index + 1] if index + 1 < len(sending) else []
            self.ledger = self._folded(
                dict(zip((p.outbox_id for p in chunk), honcho_ids, strict=True))
            ).model_copy(
                update={
                    "in_flight": [p.outbox_id for p in following],
                    "in_flight_since": time.time() if following else None,
                }
            )
            self._save()
            self.report.delivered_messages += len(chunk)
        self.report.state = DeliveryState.MORE if rest else DeliveryState.DELIVERED
        log.info(
            "batch delivered",
            extra={
                "action": "batch_delivered",
                "conversation_key": self.key,
                "messages": self.report.delivered_messages,
                "calls": self.report.calls,
            },
        )

    def _clear_mark(self) -> None:
        """Nothing of the marked send can land: no fence (written with the failure)."""
        self.ledger = self.ledger.model_copy(update={"in_flight": [], "in_flight_since": None})

    def _write_mark(self, chunk: list[Pending], **update: Any) -> None:
        """The write-ahead mark: these ids are about to be sent, starting now."""
        self.ledger = self.ledger.model_copy(
            update={
                "in_flight": [p.outbox_id for p in chunk],
                "in_flight_since": time.time(),
                **update,
            }
        )
        self._save()

    def _folded(self, delivered: dict[str, str | None]) -> Ledger:
        folded = fold(
            self.ledger,
            self.records,
            delivered,
            batch_window=self.settings.delivered_batch_window,
            anchor_window=self.settings.anchor_window,
            now=time.time(),
        )
        if folded.failures and folded.messages_delivered > self.ledger.messages_delivered:
            folded = folded.model_copy(update={"failures": 0})  # progress: the count restarts
        return folded

    def _author(self, item: Pending) -> str:
        if item.message.get("role") == AGENT:
            return self.settings.agent_peer_id
        return str(item.record.get("user_peer_id") or ids.peer_id(item.record.get("owner")))

    def _outgoing(self, item: Pending) -> adapter.OutgoingMessage:
        metadata: dict[str, Any] = {
            **(item.message.get("meta") or {}),
            OUTBOX_ID_KEY: item.outbox_id,
        }
        return adapter.OutgoingMessage(
            peer_id=self._author(item),
            content=str(item.message["text"]),
            metadata=metadata,
            created_at=created_at(item.record),
        )

    # ---- bookkeeping ----------------------------------------------------------------

    def _record_failure(self, exc: MemhonchoError) -> None:
        """Keep the failure (and the current mark) in the ledger; never raise over ``exc``."""
        now = time.time()
        error: dict[str, Any] = {"code": exc.code, "message": exc.message, "at": now}
        status = getattr(exc, "status", None)
        if status is not None:
            error["status"] = status
        update: dict[str, Any] = {"last_error": error}
        if isinstance(exc, HonchoFailure):
            update["failures"] = self.ledger.failures + 1
            parked.park(self.deployment.layout, self.key, exc.code, now)
        try:
            self.ledger = self.ledger.model_copy(update=update)
            self._save()
        except (OSError, MemhonchoError):
            log.exception(
                "could not record a delivery failure",
                extra={"action": "failure_not_recorded", "conversation_key": self.key},
            )
        log.warning(
            "delivery failed",
            extra={"action": "delivery_failed", "conversation_key": self.key, "code": exc.code},
        )

    def _write_if_error_cleared(self) -> None:
        """Nothing to send: clear a kept error; write what the ledger holds unsaved."""
        if self.ledger.last_error is not None or self.unsaved:
            self.ledger = self.ledger.model_copy(update={"last_error": None})
            self._save()

    def _save(self) -> None:
        self.store.write_ledger(self.key, self.ledger)
        self.unsaved = False

    def _mark_last_delivery(self) -> None:
        """The last-delivery marker for the status view: the newest delivery wins."""
        self.store.mark_last_delivery(
            {
                "at": self.ledger.last_delivered_at or time.time(),
                "conversation_key": self.key,
                "messages": self.report.delivered_messages + self.report.recovered_messages,
                "calls": self.report.calls,
            },
        )
