"""Run -> outbox batch: pure, no I/O.

User texts come first in admission order, then the answer's text blocks joined, when the run
was answered. Unanswered runs tag their user entries ``unanswered: true``. Texts longer than
``max_message_length`` are split into parts (``part``/``parts`` in metadata), never skipped.
Empty and whitespace-only texts (and parts) are skipped: Honcho refuses them. Secrets are
redacted from every text first (``redaction.py``), before splitting, so none is ever written.
The record's ``digest`` hashes its content (owner, entries, redacted texts, answered or not;
not how texts were split, nor ``happened_at``), so the same run id captured with other content
is recognised. ``happened_at`` (the run's own time, UTC ISO 8601) is kept when the host gave it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from memhoncho import ids
from memhoncho.errors import InvalidEvent
from memhoncho.models import (
    AGENT,
    HAPPENED_AT_RULE,
    USER,
    Answered,
    OutboxMessage,
    Record,
    RunEvent,
    SelectionChange,
)
from memhoncho.privacy.redaction import Redactor

SELECTION_NAME = "memhoncho"  # the name a host's selection lists to include memhoncho
ANSWER_JOINER = "\n\n"  # between the answer's text blocks


def batch_id(conversation_id: str, run_id: str) -> str:
    """Stable per run, so capturing the same run twice is recognised."""
    digest = hashlib.sha256(f"{conversation_id}\x00{run_id}".encode()).hexdigest()
    return f"b{digest[:31]}"


def is_selected(selection: list[str] | SelectionChange | None) -> bool:
    """The array form selects exactly its members; the object form never excludes memhoncho."""
    if isinstance(selection, list):
        return SELECTION_NAME in selection
    return True


def split_text(text: str, limit: int) -> list[str]:
    """Parts of at most ``limit`` characters, whitespace-only parts left out."""
    parts = [text[i : i + limit] for i in range(0, len(text), limit)]
    return [part for part in parts if part.strip()]


def _check_unicode(text: str, what: str = "a text") -> None:
    """Refuse what a store cannot hold, at validation, so both stores give the same answer.

    A lone surrogate has no UTF-8 form; PostgreSQL's ``text`` and ``jsonb`` cannot hold U+0000
    (the file store could, but a run must not be accepted on one store and refused on the
    other, nor moved by ``store migrate`` into a database that refuses it). Encoding it instead
    would change what Honcho receives; refusing it tells the host at once (ERR_INVALID_EVENT).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEvent(f"{what} is not valid Unicode (lone surrogate)") from None
    if "\x00" in text:
        raise InvalidEvent(f"{what} holds a NUL character (U+0000), which no store can keep")


def build_messages(
    event: RunEvent, *, max_message_length: int, redactor: Redactor | None = None
) -> list[OutboxMessage]:
    """The messages of the run in delivery order, without their outbox ids."""
    return _build(event, max_message_length, redactor)[0]


def _build(
    event: RunEvent, max_message_length: int, redactor: Redactor | None
) -> tuple[list[OutboxMessage], str, int]:
    """The messages, the content digest and the number of secrets redacted."""
    unanswered = not isinstance(event.outcome, Answered)
    entries: list[tuple[str, int, str, dict[str, Any]]] = []
    for item in event.inputs:
        extra: dict[str, Any] = {"unanswered": True} if unanswered else {}
        entries.append((USER, item.entry_id, item.text, extra))
    if isinstance(event.outcome, Answered):
        answer = event.outcome.answer
        texts = [b.text for b in answer.content if b.type == "text" and b.text]
        entries.append((AGENT, answer.entry_id, ANSWER_JOINER.join(texts), {}))
    messages: list[OutboxMessage] = []
    content: list[object] = [event.owner, unanswered]
    redactions = 0
    for role, entry_id, text, extra in entries:
        _check_unicode(text)
        if redactor is not None:
            text, found = redactor.redact(text)
            redactions += found
        content.append((role, entry_id, text))
        parts = split_text(text, max_message_length)
        for number, part in enumerate(parts, start=1):
            metadata: dict[str, Any] = {"entry_id": entry_id, "run_id": event.run_id, **extra}
            if len(parts) > 1:
                metadata.update(part=number, parts=len(parts))
            messages.append({"role": role, "entry_id": entry_id, "text": part, "meta": metadata})
    return messages, content_digest(content), redactions


def content_digest(content: list[object]) -> str:
    """A short, stable hash of a run's content (of its redacted texts: no secret is hashed)."""
    payload = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def build_record(
    event: RunEvent,
    *,
    user_peer_id: str,
    max_message_length: int,
    captured_at: float,
    redactor: Redactor | None = None,
) -> Record | None:
    """The outbox record of the run (``seq`` is added by the outbox); None when it is empty.

    ``redactions`` (the number of secrets replaced) is in the record only when it is not 0.
    """
    named = (
        ("conversation id", event.conversation_id),
        ("run id", event.run_id),
        ("owner", event.owner),
    )
    for name, value in named:
        if value is not None:
            _check_unicode(value, name)
    messages, digest, redactions = _build(event, max_message_length, redactor)
    if not messages:
        return None
    bid = batch_id(event.conversation_id, event.run_id)
    for index, message in enumerate(messages):
        message["id"] = f"{bid}-{index}"
    record: Record = {
        "batch_id": bid,
        "conversation_id": event.conversation_id,
        "owner": event.owner,
        "user_peer_id": user_peer_id,
        "run_id": event.run_id,
        "captured_at": captured_at,
        "digest": digest,
        "messages": messages,
    }
    if event.happened_at is not None:  # not in the digest: a time is not the run's content
        record["happened_at"] = event.happened_at.isoformat()
    if event.session_metadata:  # nor this: it describes the session, not the run
        record["session_metadata"] = dict(event.session_metadata)
    if redactions:
        record["redactions"] = redactions
    return record


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")  # echoed in InvalidEvent; else "?"


def _field_path(loc: tuple[int | str, ...]) -> str:
    """Where the run is malformed; a key that does not look like a field name is not echoed."""
    return ".".join(
        str(part) if isinstance(part, int) or _FIELD_NAME.fullmatch(part) else "?" for part in loc
    )


def validate_run(event: Mapping[str, Any] | RunEvent) -> RunEvent:
    """The run as the model it must be (``InvalidEvent`` naming the malformed fields), with
    its conversation id and owner checked as names."""
    if isinstance(event, RunEvent):
        run = event
    elif isinstance(event, Mapping):
        try:
            run = RunEvent.model_validate(dict(event))
        except ValidationError as exc:
            fields = sorted({_field_path(err["loc"]) for err in exc.errors()})
            rule = f" (happened_at: {HAPPENED_AT_RULE})" if "happened_at" in fields else ""
            raise InvalidEvent(
                f"the run is malformed at: {', '.join(fields[:10])}{rule}", fields=fields[:10]
            ) from None
    else:
        raise InvalidEvent("the run must be a mapping")
    ids.conversation_key(run.conversation_id)
    ids.peer_id(run.owner)
    return run
