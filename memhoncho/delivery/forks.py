"""Fork continuity: a forked conversation's Honcho session starts as its parent's, cut at the fork.

``fork_conversation`` (the host, no network) writes the pending record. The child's first
delivery calls ``resolve_pending_fork`` under the child's lock; the sweep calls
``resolve_pending_forks`` first. Resolution waits (``ForkWaiting``, bounded by ``fork_wait_s``
from the record's creation) until the parent has delivered every message at or before the fork
point, then clones the parent at its anchor (``clone.Clone``) or decides to start fresh.

Anchors (``Ledger.anchors``) are the parent's delivered messages as (entry id, Honcho message
id), in delivery order. The clone point is the last message of the longest delivered prefix
whose entries are all at or before ``at_entry``: an answer delivered after an input that came
later in the transcript (the answer-before-input case) is not cloned, nor anything after it,
so the child's Honcho history never holds an entry its transcript lacks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    ForkRefused,
    ForkWaiting,
    InFlightSettling,
    InvalidInput,
    LockBusy,
    MemhonchoError,
)
from memhoncho.models import ForkDecision, ForkOutcome, Ledger
from memhoncho.store import forks as fork_store
from memhoncho.store.base import Store
from memhoncho.store.forks import ForkRecord

if TYPE_CHECKING:
    from honcho import Honcho

    from memhoncho.delivery.clone import Clone

# delivery.clone (and through it honcho-ai) loads where a fork is resolved, not with the
# status view's fork_summary.

log = logging.getLogger(__name__)

PARENT_LOCK_WAIT_S = 2.0  # seconds to wait for the parent's lock before retrying later
MAX_FORK_DEPTH = 1000  # ancestors walked when refusing a fork that would close a cycle
RECENT_DECISIONS = fork_store.RECENT_DECISIONS

__all__ = [
    "ForkPlan",
    "ParentView",
    "fork_conversation",
    "fork_summary",
    "pending_fork_keys",
    "plan_fork",
    "resolve_fork_now",
    "resolve_pending_fork",
    "resolve_pending_forks",
]


def pending_fork_keys(store: Store) -> list[str]:
    return store.pending_fork_keys()


# ---- the host's side --------------------------------------------------------------------


def fork_conversation(deployment: Deployment, parent_id: str, child_id: str, at_entry: int) -> None:
    """Record the fork durably (one fsynced file); refuse what cannot be honoured."""
    parent_key = ids.conversation_key(parent_id)
    child_key = ids.conversation_key(child_id)
    if not isinstance(at_entry, int) or isinstance(at_entry, bool) or at_entry < 0:
        raise InvalidInput("at_entry must be a non-negative integer", field="at_entry")
    if parent_key == child_key:
        raise ForkRefused("a conversation cannot be forked from itself")
    store = deployment.store()
    ledger = store.read_ledger(child_key)
    if ledger is not None and (ledger.session_id is not None or ledger.fork is not None):
        raise ForkRefused("the child conversation already has a Honcho session")
    if _descends_from(store, parent_key, child_key):
        raise ForkRefused("the parent conversation is itself a pending fork of the child")
    record = ForkRecord(
        parent_id=parent_id, child_id=child_id, at_entry=at_entry, created_at=time.time()
    )
    if not store.create_fork(child_key, record):
        raise ForkRefused("the child conversation already has a fork record")
    log.info(
        "fork recorded",
        extra={"action": "fork_recorded", "conversation": child_key, "parent": parent_key},
    )


def _descends_from(store: Store, key: str, ancestor: str) -> bool:
    """Whether ``key``'s chain of pending forks reaches ``ancestor``."""
    seen = {key}
    for _ in range(MAX_FORK_DEPTH):
        record = store.read_fork(key)
        if record is None:
            return False
        key = ids.conversation_key(record.parent_id)
        if key == ancestor:
            return True
        if key in seen:
            return False
        seen.add(key)
    return False


# ---- the decision (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class ParentView:
    """What the child's resolution knows of its parent."""

    ledger: Ledger | None
    pending_entries: tuple[int, ...]  #: entry ids of the parent's undelivered messages
    seen: bool  #: memhoncho has a ledger or outbox records of the parent


@dataclass(frozen=True)
class ForkPlan:
    """Wait (``outcome`` None), clone at ``anchor``, or start fresh; ``reason`` says why."""

    outcome: ForkOutcome | None
    reason: str
    anchor: tuple[int, str] | None = None


def plan_fork(
    record: ForkRecord, parent: ParentView, *, now: float, wait_limit_s: float, anchor_window: int
) -> ForkPlan:
    at = record.at_entry
    if not parent.seen:
        return ForkPlan("none-unknown-parent", "memhoncho never saw the parent conversation")
    waiting = sum(1 for entry in parent.pending_entries if entry <= at)
    if waiting:
        if now - record.created_at >= wait_limit_s:
            return ForkPlan(
                "none-timeout",
                f"the parent still had {waiting} undelivered messages at or before entry {at} "
                f"after {wait_limit_s:g} s",
            )
        return ForkPlan(None, f"waiting for {waiting} parent messages at or before entry {at}")
    ledger = parent.ledger
    if ledger is None or ledger.session_id is None:
        return ForkPlan("none-empty", f"the parent delivered nothing at or before entry {at}")
    anchor: tuple[int, str] | None = None
    for entry, message_id in ledger.anchors:
        if entry > at:
            break
        anchor = (entry, message_id)
    if anchor is not None:
        return ForkPlan("clone", f"clone at the parent's anchor for entry {anchor[0]}", anchor)
    # Anchors are kept for the newest ``anchor_window`` entries: a full window has dropped
    # older ones, so the fork point may have been delivered and its anchor let go.
    trimmed = len(ledger.anchors) >= anchor_window
    if trimmed or (ledger.messages_delivered and not ledger.anchors):
        oldest = ledger.anchors[0][0] if ledger.anchors else None
        return ForkPlan(
            "none-window",
            f"the parent's anchors no longer reach entry {at} (oldest kept: {oldest})",
        )
    return ForkPlan("none-empty", f"the parent delivered nothing at or before entry {at}")


# ---- resolution (the child's lock is held by the caller) --------------------------------


def resolve_pending_fork(
    deployment: Deployment, client: Honcho, key: str, conversation_id: str, ledger: Ledger
) -> Ledger:
    """Establish the child's session from its pending fork; the ledger as written.

    Called under the child's conversation lock when its ledger has no session. Returns the
    ledger with ``session_id`` set (clone) or with only ``fork`` set (start a fresh session).
    Raises ForkWaiting while the parent has not delivered up to the fork point, LockBusy when
    the parent's lock is taken.
    """
    store = deployment.store()
    record = store.read_fork(key)
    if record is None:
        return ledger
    if _decided(ledger):
        if ledger.fork is None:
            log.warning(
                "fork record ignored: the child already had a session",
                extra={"action": "fork_ignored", "conversation": key},
            )
        store.remove_fork(key)
        return ledger
    parent_key = ids.conversation_key(record.parent_id)
    # The parent's lock serializes clones of one parent (its metadata carries one tag at a
    # time) and holds its ledger still while the clone point is chosen.
    with store.conversation_lock(parent_key, timeout_s=PARENT_LOCK_WAIT_S):
        ledger = _resolve_locked(deployment, client, key, record, parent_key, ledger)
    store.remove_fork(key)
    from memhoncho.delivery.clone import reached

    reached("record-removed")
    return ledger


def _decided(ledger: Ledger) -> bool:
    """The child's session is established, or its fork was decided (a fresh start)."""
    return ledger.session_id is not None or (
        ledger.fork is not None and ledger.clone_intent is None
    )


def _resolve_locked(
    deployment: Deployment,
    client: Honcho,
    key: str,
    record: ForkRecord,
    parent_key: str,
    ledger: Ledger,
) -> Ledger:
    store = deployment.store()
    parent_ledger = store.read_ledger(parent_key)
    if ledger.clone_intent is not None:  # an interrupted clone: finish it, never re-plan
        return _clone(deployment, client, key, record, parent_ledger, ledger).resume(ledger)
    if (parent_ledger is None or parent_ledger.session_id is None) and store.read_fork(
        parent_key
    ) is not None:
        # A fork of a fork whose own fork is unresolved: resolve the parent first (its lock is
        # held here), so there is a session and anchors to clone from.
        parent_ledger = resolve_pending_fork(
            deployment,
            client,
            parent_key,
            record.parent_id,
            parent_ledger or Ledger(conversation_id=record.parent_id),
        )
    delivered_seq = parent_ledger.delivered_seq if parent_ledger else 0
    pending = store.pending(parent_key, delivered_seq)
    parent = ParentView(
        ledger=parent_ledger,
        pending_entries=tuple(m["entry_id"] for r in pending for m in r["messages"]),
        # Every record has seq > 0 and compaction needs a ledger: no ledger and nothing
        # pending means memhoncho never had a record of the parent.
        seen=parent_ledger is not None or bool(pending),
    )
    settings = deployment.settings()
    plan = plan_fork(
        record,
        parent,
        now=time.time(),
        wait_limit_s=settings.fork_wait_s,
        anchor_window=settings.anchor_window,
    )
    if plan.outcome is None:
        raise ForkWaiting(plan.reason)
    if plan.outcome == "clone" and plan.anchor is not None and parent_ledger is not None:
        assert parent_ledger.session_id is not None
        clone = _clone(deployment, client, key, record, parent_ledger, ledger)
        return clone.start(ledger, parent_ledger.session_id, *plan.anchor)
    decision = ForkDecision(
        parent_id=record.parent_id,
        at_entry=record.at_entry,
        outcome=plan.outcome,
        parent_session_id=parent_ledger.session_id if parent_ledger else None,
        decided_at=time.time(),
        reason=plan.reason,
    )
    store.append_decision(key, decision)
    ledger = ledger.model_copy(update={"fork": decision})
    store.write_ledger(key, ledger)
    from memhoncho.delivery.clone import reached

    reached("decided")
    log.info(
        "fork resolved: the child starts a fresh session",
        extra={"action": "fork_resolved", "conversation": key, "outcome": plan.outcome},
    )
    return ledger


def _clone(
    deployment: Deployment,
    client: Honcho,
    key: str,
    record: ForkRecord,
    parent_ledger: Ledger | None,
    ledger: Ledger,
) -> Clone:
    from memhoncho.delivery.clone import Clone

    settings = deployment.settings()
    return Clone(
        deployment.store(),
        client,
        key,
        record,
        parent_key=ids.conversation_key(record.parent_id),
        user_peer_id=_user_peer_id(deployment.store(), key, ledger, parent_ledger),
        agent_peer_id=settings.agent_peer_id,
        anchor_window=settings.anchor_window,
        settings=settings,
    )


def _user_peer_id(store: Store, key: str, ledger: Ledger, parent: Ledger | None) -> str:
    """The child's user: from its own records, else its owner, else the parent's owner."""
    for record in store.pending(key, ledger.delivered_seq):
        peer = record.get("user_peer_id")
        if isinstance(peer, str):
            return peer
    owner = ledger.owner if ledger.owner is not None else (parent.owner if parent else None)
    return ids.peer_id(owner)


# ---- the sweep's side and the status view -----------------------------------------------


def resolve_fork_now(deployment: Deployment, child_id: str) -> dict[str, Any]:
    """Resolve one pending fork now, under the child's lock (tried once, never waited for)."""
    from memhoncho.honcho import adapter

    key = ids.conversation_key(child_id)
    store = deployment.store()
    result: dict[str, Any] = {"conversation_key": key}
    try:
        with store.conversation_lock(key, timeout_s=0):
            if store.read_fork(key) is None:
                return {**result, "status": "none"}
            ledger = store.read_ledger(key) or Ledger(conversation_id=child_id)
            if _decided(ledger):  # a crash came between the ledger and the record's removal
                store.remove_fork(key)
            else:
                client = adapter.write_client(deployment.honcho_target())
                ledger = resolve_pending_fork(deployment, client, key, child_id, ledger)
    except (ForkWaiting, InFlightSettling) as exc:
        return {**result, "status": "waiting", "reason": exc.message}
    except LockBusy:
        return {**result, "status": "busy"}
    except MemhonchoError as exc:
        return {**result, "status": "failed", "code": exc.code}
    return {**result, "status": "resolved", "outcome": ledger.fork.outcome if ledger.fork else None}


def resolve_pending_forks(deployment: Deployment) -> list[dict[str, Any]]:
    """Try every pending fork once (the sweep, before it redelivers); one result each."""
    results = []
    store = deployment.store()
    for key in store.pending_fork_keys():
        try:
            record = store.read_fork(key)
        except MemhonchoError as exc:
            results.append({"conversation_key": key, "status": "failed", "code": exc.code})
            continue
        if record is not None:
            results.append(resolve_fork_now(deployment, record.child_id))
    return results


# The status view's summary lives with the records it reads (``store/forks.py``), so the view
# does not import the delivery side; it is re-exported here where it always was.
fork_summary = fork_store.fork_summary
