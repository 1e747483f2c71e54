"""Honcho operations on sessions and their messages: thin, typed, plain values in and out.

Each takes a client plus plain values and returns plain values (dicts, strings, lists), so no
other module touches SDK types; every failure leaves as a memhoncho error (``retry.translated``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from honcho import Honcho
from honcho.api_types import (
    DreamConfiguration,
    MessageCreateParams,
    SessionConfiguration,
    SessionPeerConfig,
    SummaryConfiguration,
)
from honcho.message import Message
from honcho.session import Session

from memhoncho.errors import HonchoRejected, HonchoUnavailable
from memhoncho.honcho.clients import statuses
from memhoncho.honcho.retry import translated

MAX_MESSAGES_PER_CALL = 100  # Honcho answers 422 past this (HONCHO.md, "Limits")
PAGE_SIZE = 100  # the largest page Honcho serves
FILTER_CHUNK = 100  # values per metadata ``in`` filter
CREATED = 201  # a get-or-create's answer when it created (200: it found)

#: Summaries and dreams on, so Honcho derives what memhoncho later reads.
SESSION_CONFIGURATION = SessionConfiguration(
    summary=SummaryConfiguration(enabled=True), dream=DreamConfiguration(enabled=True)
)
#: Honcho models the user; the agent observes the user and is not modelled itself.
USER_PEER_CONFIG = SessionPeerConfig(observe_me=True, observe_others=False)
AGENT_PEER_CONFIG = SessionPeerConfig(observe_me=False, observe_others=True)


@dataclass(frozen=True)
class OutgoingMessage:
    """One message to store: its author, text, metadata and (optional) original time."""

    peer_id: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


def ensure_session(
    client: Honcho,
    session_id: str,
    user_peer_id: str,
    agent_peer_id: str,
    metadata: dict[str, Any] | None = None,
) -> int:
    """Get or create the session with memhoncho's config and members, before any message;
    the requests it took (1 or 3).

    Honcho answers 201 when the get-or-create created the session: its members were made
    with the config given, one request in all. Any other answer (200: it was there) may
    hide a member with another config, and session peer config is sticky (HONCHO.md):
    ``peers=`` is ignored for members already present, so each is set again explicitly.
    """
    with translated(), statuses() as answered:
        session = client.session(
            session_id,
            metadata=metadata,
            configuration=SESSION_CONFIGURATION,
            peers=[(user_peer_id, USER_PEER_CONFIG), (agent_peer_id, AGENT_PEER_CONFIG)],
        )
    if answered[-1:] == [CREATED]:  # the session's POST is the call's last request
        return 1
    with translated():
        session.set_peer_configuration(user_peer_id, USER_PEER_CONFIG)
        session.set_peer_configuration(agent_peer_id, AGENT_PEER_CONFIG)
    return 3


def add_messages(client: Honcho, session_id: str, messages: list[OutgoingMessage]) -> list[str]:
    """Store ``messages`` in order with ONE request; Honcho's message ids, in request order."""
    if not messages:
        return []
    if len(messages) > MAX_MESSAGES_PER_CALL:
        raise HonchoRejected(
            f"At most {MAX_MESSAGES_PER_CALL} messages go in one call", count=len(messages)
        )
    with translated():
        params = [
            MessageCreateParams(
                peer_id=m.peer_id,
                content=m.content,
                metadata=dict(m.metadata) or None,
                created_at=m.created_at,
            )
            for m in messages
        ]
        stored = Session(session_id, client).add_messages(params)
    if len(stored) != len(messages):
        raise HonchoUnavailable(
            "Honcho stored a different number of messages than sent",
            sent=len(messages),
            stored=len(stored),
            unclear=True,
        )
    return [m.id for m in stored]


def find_outbox_ids(client: Honcho, session_id: str, key: str, values: list[str]) -> dict[str, str]:
    """Which of ``values`` (of metadata ``key``) the session already holds: value -> message id.

    Where a value is stored twice, the first stored copy is the one named.
    """
    found: dict[str, str] = {}
    wanted = list(dict.fromkeys(values))
    with translated():
        session = Session(session_id, client)
        for start in range(0, len(wanted), FILTER_CHUNK):
            chunk = wanted[start : start + FILTER_CHUNK]
            page = session.messages(filters={"metadata": {key: {"in": chunk}}}, size=PAGE_SIZE)
            for message in page:
                value = message.metadata.get(key)
                if isinstance(value, str) and value in chunk and value not in found:
                    found[value] = message.id
    return found


def list_messages(client: Honcho, session_id: str) -> list[dict[str, Any]]:
    """Every message of the session, all pages, in insertion order."""
    with translated():
        return [_message(m) for m in Session(session_id, client).messages(size=PAGE_SIZE)]


def clone_session(client: Honcho, session_id: str, message_id: str) -> str:
    """Clone up to and including ``message_id``; the new (random) session id.

    Not idempotent: a retry makes a second clone. Record the intent first and look for an
    existing clone (``find_sessions``) before cloning again.
    """
    with translated():
        return Session(session_id, client).clone(message_id=message_id).id


def find_sessions(client: Honcho, metadata_filter: dict[str, Any]) -> list[dict[str, Any]]:
    """Sessions of the workspace whose metadata matches, oldest first."""
    with translated():
        page = client.sessions(filters={"metadata": metadata_filter}, size=PAGE_SIZE)
        return [
            {
                "id": s.id,
                "metadata": dict(s.metadata or {}),
                "created_at": s.created_at,
                "is_active": s.is_active,
            }
            for s in page
        ]


def session_metadata(client: Honcho, session_id: str) -> dict[str, Any]:
    """The session's metadata as Honcho holds it now (a get-or-create: the session must exist)."""
    with translated():
        return dict(Session(session_id, client).get_metadata())


def set_session_metadata(client: Honcho, session_id: str, metadata: dict[str, Any]) -> None:
    """Replace the session's metadata."""
    with translated():
        Session(session_id, client).set_metadata(metadata)


def session_peer_ids(client: Honcho, session_id: str) -> list[str]:
    """The ids of the session's members (HonchoRejected 404 when there is no such session)."""
    with translated():
        return [p.id for p in Session(session_id, client).peers()]


def session_context(
    client: Honcho,
    session_id: str,
    tokens: int | None = None,
    peer_target: str | None = None,
    peer_perspective: str | None = None,
    *,
    limit_to_session: bool = False,
) -> dict[str, Any]:
    """The session's prompt context, plainly: summary text, representation, card, count."""
    with translated():
        context = Session(session_id, client).context(
            tokens=tokens,
            summary=True,
            peer_target=peer_target,
            peer_perspective=peer_perspective,
            limit_to_session=limit_to_session,
        )
    return {
        "summary": context.summary.content if context.summary else None,
        "peer_representation": context.peer_representation,
        "peer_card": list(context.peer_card) if context.peer_card is not None else None,
        "messages": len(context.messages),
    }


def _message(m: Message) -> dict[str, Any]:
    return {
        "id": m.id,
        "content": m.content,
        "peer_id": m.peer_id,
        "session_id": m.session_id,
        "metadata": dict(m.metadata),
        "created_at": m.created_at,
        "token_count": m.token_count,
    }
