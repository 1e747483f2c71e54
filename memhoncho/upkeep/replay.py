"""Replay: dead letters go back into the outbox, to be delivered like a fresh capture.

Each dead record is appended again (``Outbox.append`` gives it a new seq, after everything
already there) and only then removed from the dead-letter file, atomically, so a crash in
between leaves it in both places and a second replay finds it a duplicate. A batch Honcho is
known to hold (the ledger's delivered window) or already in the outbox is not appended twice.
``replayed_at`` restarts the retention clock, so the next sweep does not take it straight back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError
from memhoncho.store.base import Record, Store
from memhoncho.store.deadletters import revived

log = logging.getLogger(__name__)


class ConversationReplayed(BaseModel):
    conversation_key: str
    conversation_id: str | None = None
    replayed: int = 0  #: appended to the outbox again
    already_present: int = 0  #: in the outbox or delivered already: only removed
    left: int = 0  #: still in the dead-letter file (outbox full, or a failure)
    enqueued: bool = False
    error: str | None = None  #: the code of what stopped it


class ReplayReport(BaseModel):
    replayed: int = 0
    already_present: int = 0
    left: int = 0
    conversations: list[ConversationReplayed] = Field(default_factory=list)


def replay(
    deployment: Deployment,
    conversation_id: str | None = None,
    enqueue: Callable[[str], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Move dead letters (all, or one conversation's) back into the outbox; then enqueue.

    ``progress(done, total)`` is called after each conversation (``memhoncho replay``).
    """
    store = deployment.store()
    keys = [ids.conversation_key(conversation_id)] if conversation_id is not None else None
    report = ReplayReport()
    max_pending = deployment.settings().max_pending_batches
    keys = keys if keys is not None else store.dead_keys()
    for count, key in enumerate(keys, 1):
        done = _replay_one(store, key, max_pending)
        if done.replayed and enqueue is not None and done.conversation_id is not None:
            try:
                done.enqueued = bool(enqueue(done.conversation_id))
            except Exception:  # the sweep enqueues it later
                done.enqueued = False
        report.conversations.append(done)
        report.replayed += done.replayed
        report.already_present += done.already_present
        report.left += done.left
        if progress is not None:
            progress(count, len(keys))
    return report


def _replay_one(store: Store, key: str, max_pending: int) -> ConversationReplayed:
    done = ConversationReplayed(conversation_key=key, conversation_id=ids.decode(key))
    now = time.time()
    with store.dead_lock(key):
        records = store.read_dead(key)
        remaining: list[Record] = []
        seen: set[str] = set()
        for index, record in enumerate(records):
            if isinstance(record.get("conversation_id"), str):
                done.conversation_id = record["conversation_id"]
            batch = record.get("batch_id")
            if not isinstance(batch, str) or batch in seen:
                done.already_present += 1
                continue
            seen.add(batch)
            try:
                # A batch the ledger's window says was delivered is a duplicate, as in capture.
                appended = store.append(key, revived(record, now), max_pending=max_pending)
            except MemhonchoError as exc:  # OutboxCapacity, StoreError: keep the rest
                remaining.extend(records[index:])
                done.error = exc.code
                break
            if appended.duplicate:
                done.already_present += 1
            else:
                done.replayed += 1
        store.replace_dead(key, remaining)
    done.left = len(remaining)
    log.info(
        "dead letters replayed",
        extra={
            "action": "dead_letters_replayed",
            "conversation_key": key,
            "replayed": done.replayed,
            "already_present": done.already_present,
            "left": done.left,
        },
    )
    return done
