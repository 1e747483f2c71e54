"""Many runs captured with one fsync per conversation's batch: ``memhoncho import``'s way.

Each run is validated and built as ``Host.capture`` does (a refusal is that run's answer,
the others go on); the runs of one conversation are appended together (``Store.append_batch``:
the files write them with one fsync), and the conversation is left one hint as a capture
leaves it (to the outbox relay). When this returns, every run it answered ``captured`` is durable.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memhoncho import ids
from memhoncho.capture.record import build_record, is_selected, validate_run
from memhoncho.errors import InvalidInput, MemhonchoError
from memhoncho.models import CaptureResult, CaptureStatus, HintOutcome, Record
from memhoncho.privacy import redaction
from memhoncho.store import hint_marks, open_store
from memhoncho.store.redactions import add_redactions

if TYPE_CHECKING:
    from memhoncho.capture.host import Host

Answer = CaptureResult | MemhonchoError


def capture_batch(host: Host, events: Sequence[Mapping[str, Any]]) -> list[Answer]:
    """Capture ``events`` in order; one answer each (a ``CaptureResult`` or the refusal)."""
    current = host.deployment.settings()
    redactor = redaction.redactor(current.redact_patterns)
    answers: list[Answer | None] = [None] * len(events)
    groups: dict[str, tuple[str, list[tuple[int, Record]]]] = {}
    now = time.time()
    for index, event in enumerate(events):
        try:
            run = validate_run(event)
            key = ids.conversation_key(run.conversation_id)
            if not is_selected(run.selection):
                answers[index] = CaptureResult(status=CaptureStatus.NOT_SELECTED)
                continue
            record = build_record(
                run,
                user_peer_id=ids.peer_id(run.owner),
                max_message_length=current.max_message_length,
                captured_at=now,
                redactor=redactor,
            )
        except InvalidInput as exc:
            answers[index] = exc
            continue
        if record is None:
            answers[index] = CaptureResult(status=CaptureStatus.EMPTY)
            continue
        groups.setdefault(key, (run.conversation_id, []))[1].append((index, record))
    store = open_store(host.deployment.data_dir, current.store_url, current.store_timeout_s)
    redacted = 0
    for key, (conversation_id, members) in groups.items():
        outcomes = store.append_batch(
            key,
            [record for _, record in members],
            max_pending=current.max_pending_batches,
            max_bytes=current.max_batch_bytes,
        )
        stored = False
        for (index, record), outcome in zip(members, outcomes, strict=True):
            if isinstance(outcome, MemhonchoError):
                answers[index] = outcome
            elif outcome.duplicate:
                answers[index] = CaptureResult(
                    status=CaptureStatus.DUPLICATE, batch_id=record["batch_id"]
                )
            else:
                stored = True
                redacted += int(record.get("redactions", 0))
                answers[index] = CaptureResult(
                    status=CaptureStatus.CAPTURED,
                    batch_id=record["batch_id"],
                    hint=HintOutcome.RELAY,
                    redactions=int(record.get("redactions", 0)),
                )
        if stored and store.kind == "files":  # PostgreSQL left the relay its request itself
            _leave_hint(host, key, conversation_id)
    if redacted:
        add_redactions(host.deployment.layout, redacted)
    return [a for a in answers if a is not None]


def _leave_hint(host: Host, key: str, conversation_id: str) -> None:
    """One hint for the conversation's new records, left to the outbox relay as
    ``memhoncho capture`` leaves it (the workers find them too, relay or not)."""
    layout = host.deployment.layout
    if hint_marks.claim(layout, key):
        hint_marks.request_relay(layout, key, conversation_id)
