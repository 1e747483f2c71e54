"""The one place memhoncho calls the Honcho SDK: clients, and thin typed operations.

Operations take a client plus plain values and return plain values (dicts, strings, lists),
so no other module touches SDK types. Every failure leaves as a memhoncho error
(``retry.translate``); ``classify`` turns it into a retry decision.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from honcho import Honcho
from honcho.api_types import (
    DreamConfiguration,
    MessageCreateParams,
    SessionConfiguration,
    SessionPeerConfig,
    SummaryConfiguration,
)
from honcho.message import Message
from honcho.peer import Peer
from honcho.session import Session

from memhoncho.errors import HonchoNoLLM, HonchoRejected, HonchoUnavailable, MemhonchoError
from memhoncho.honcho.retry import RetryDecision, backoff_s, classify, proves_refusal, translate

__all__ = [
    "HonchoTarget",
    "OutgoingMessage",
    "RetryDecision",
    "add_messages",
    "backoff_s",
    "chat",
    "classify",
    "clone_session",
    "close_clients",
    "create_conclusion",
    "ensure_session",
    "find_outbox_ids",
    "find_sessions",
    "list_messages",
    "proves_refusal",
    "read_client",
    "representation",
    "search_user_messages",
    "session_context",
    "session_metadata",
    "session_peer_ids",
    "set_session_metadata",
    "write_client",
]

MAX_MESSAGES_PER_CALL = 100  # Honcho answers 422 past this (HONCHO.md, "Limits")
PAGE_SIZE = 100  # the largest page Honcho serves
FILTER_CHUNK = 100  # values per metadata ``in`` filter
MAX_SEARCH_LIMIT = 100

ReasoningLevel = Literal["minimal", "low", "medium", "high", "max"]

#: Summaries and dreams on, so Honcho derives what memhoncho later reads.
SESSION_CONFIGURATION = SessionConfiguration(
    summary=SummaryConfiguration(enabled=True), dream=DreamConfiguration(enabled=True)
)
#: Honcho models the user; the agent observes the user and is not modelled itself.
USER_PEER_CONFIG = SessionPeerConfig(observe_me=True, observe_others=False)
AGENT_PEER_CONFIG = SessionPeerConfig(observe_me=False, observe_others=True)


@dataclass(frozen=True)
class HonchoTarget:
    """Which Honcho, as whom, in which workspace. The key never shows in its repr."""

    base_url: str
    api_key: str = field(repr=False)
    workspace_id: str
    timeout_s: float = 30.0


@dataclass(frozen=True)
class OutgoingMessage:
    """One message to store: its author, text, metadata and (optional) original time."""

    peer_id: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


# ----------------------------------------------------------------- clients

_clients_lock = threading.Lock()
_clients: dict[tuple[Any, ...], tuple[HonchoTarget, Honcho]] = {}
_clients_pid: int | None = None


def write_client(target: HonchoTarget) -> Honcho:
    """The process's client for writes: ``max_retries=0``, since memhoncho owns retries."""
    return _client("write", target, target.timeout_s)


def read_client(target: HonchoTarget, timeout_s: float | None = None) -> Honcho:
    """The process's client for reads (also ``max_retries=0``), with its own timeout."""
    return _client("read", target, timeout_s if timeout_s is not None else target.timeout_s)


def _client(kind: str, target: HonchoTarget, timeout_s: float) -> Honcho:
    # One client per process and purpose: rebuilt after a fork (a child must not share
    # the parent's connections) and when the target changes (a key rotated live).
    global _clients_pid
    slot = (kind, target.base_url, target.workspace_id, timeout_s)
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients.clear()  # the parent's: dropped, never closed from here
            _clients_pid = os.getpid()
        cached = _clients.get(slot)
        if cached is not None and cached[0] == target:
            return cached[1]
        client = Honcho(
            api_key=target.api_key,
            base_url=target.base_url,
            workspace_id=target.workspace_id,
            timeout=timeout_s,
            max_retries=0,
        )
        _clients[slot] = (target, client)
    if cached is not None:
        _close(cached[1])
    return client


def close_clients() -> None:
    """Close this process's cached clients (worker shutdown, tests); new ones build lazily."""
    with _clients_lock:
        stale = [client for _, client in _clients.values()] if _clients_pid == os.getpid() else []
        _clients.clear()
    for client in stale:
        _close(client)


def _close(client: Honcho) -> None:
    try:
        client._http.close()
    except Exception:  # closing a stale client must never fail a call
        pass


@contextmanager
def _translated() -> Iterator[None]:
    """Let only memhoncho errors out; the SDK's own (which may echo content) stay inside."""
    try:
        yield
    except MemhonchoError:
        raise
    except Exception as exc:  # every SDK failure is mapped; none escapes raw
        raise translate(exc) from None


# -------------------------------------------------------------- operations


def ensure_session(
    client: Honcho,
    session_id: str,
    user_peer_id: str,
    agent_peer_id: str,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Get or create the session with memhoncho's config and members, before any message.

    Session peer config is sticky (HONCHO.md): creating with ``peers=`` is ignored for
    members already present, so the config is set again explicitly every time.
    """
    with _translated():
        session = client.session(
            session_id,
            metadata=metadata,
            configuration=SESSION_CONFIGURATION,
            peers=[(user_peer_id, USER_PEER_CONFIG), (agent_peer_id, AGENT_PEER_CONFIG)],
        )
        session.set_peer_configuration(user_peer_id, USER_PEER_CONFIG)
        session.set_peer_configuration(agent_peer_id, AGENT_PEER_CONFIG)


def add_messages(client: Honcho, session_id: str, messages: list[OutgoingMessage]) -> list[str]:
    """Store ``messages`` in order with ONE request; Honcho's message ids, in request order."""
    if not messages:
        return []
    if len(messages) > MAX_MESSAGES_PER_CALL:
        raise HonchoRejected(
            f"At most {MAX_MESSAGES_PER_CALL} messages go in one call", count=len(messages)
        )
    with _translated():
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
    with _translated():
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
    with _translated():
        return [_message(m) for m in Session(session_id, client).messages(size=PAGE_SIZE)]


def clone_session(client: Honcho, session_id: str, message_id: str) -> str:
    """Clone up to and including ``message_id``; the new (random) session id.

    Not idempotent: a retry makes a second clone. Record the intent first and look for an
    existing clone (``find_sessions``) before cloning again.
    """
    with _translated():
        return Session(session_id, client).clone(message_id=message_id).id


def find_sessions(client: Honcho, metadata_filter: dict[str, Any]) -> list[dict[str, Any]]:
    """Sessions of the workspace whose metadata matches, oldest first."""
    with _translated():
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
    with _translated():
        return dict(Session(session_id, client).get_metadata())


def set_session_metadata(client: Honcho, session_id: str, metadata: dict[str, Any]) -> None:
    """Replace the session's metadata."""
    with _translated():
        Session(session_id, client).set_metadata(metadata)


def search_user_messages(
    client: Honcho, peer_id: str, query: str, limit: int = 10
) -> list[dict[str, Any]]:
    """Messages authored by ``peer_id`` matching ``query``, across the workspace."""
    limit = min(max(limit, 1), MAX_SEARCH_LIMIT)
    with _translated():
        found = Peer(peer_id, client).search(query, limit=limit)
    return [
        {
            "content": m.content,
            "peer_id": m.peer_id,
            "session_id": m.session_id,
            "created_at": m.created_at,
            "metadata": dict(m.metadata),
        }
        for m in found
    ]


def session_peer_ids(client: Honcho, session_id: str) -> list[str]:
    """The ids of the session's members (HonchoRejected 404 when there is no such session)."""
    with _translated():
        return [p.id for p in Session(session_id, client).peers()]


def chat(
    client: Honcho,
    peer_id: str,
    target_peer_id: str,
    query: str,
    reasoning_level: ReasoningLevel | None = None,
    timeout: float | None = None,
    *,
    session_id: str | None = None,
) -> str:
    """Ask Honcho's dialectic, as ``peer_id`` (the agent), about ``target_peer_id``.

    A server without an LLM answers 500 (after a long wait) or nothing: both are
    ``HonchoNoLLM``. 502/503/504 stay ``HonchoUnavailable``.
    """
    try:
        with _translated():
            answer = Peer(peer_id, client).chat(
                query,
                target=target_peer_id,
                session=session_id,
                reasoning_level=reasoning_level,
                timeout=timeout,
            )
    except HonchoUnavailable as exc:
        if exc.status == 500:
            raise HonchoNoLLM(
                "Honcho's dialectic failed (500); the server may have no LLM configured",
                status=500,
            ) from None
        raise
    if not answer:
        raise HonchoNoLLM("Honcho's dialectic returned no answer")
    return str(answer)


def create_conclusion(
    client: Honcho,
    observer_peer_id: str,
    observed_peer_id: str,
    content: str,
    session_id: str | None = None,
) -> dict[str, Any]:
    """Store one conclusion of the observer about the observed peer (needs embeddings)."""
    item: dict[str, Any] = {"content": content}
    if session_id is not None:
        item["session_id"] = session_id
    with _translated():
        created = Peer(observer_peer_id, client).conclusions_of(observed_peer_id).create([item])
    if not created:
        raise HonchoUnavailable("Honcho stored no conclusion", unclear=True)
    c = created[0]
    return {
        "id": c.id,
        "content": c.content,
        "observer_id": c.observer_id,
        "observed_id": c.observed_id,
        "session_id": c.session_id,
        "created_at": c.created_at,
    }


def representation(
    client: Honcho, agent_peer_id: str, user_peer_id: str, session_id: str | None = None
) -> str:
    """What the agent's view of the user holds ("" when nothing was derived yet)."""
    with _translated():
        return Peer(agent_peer_id, client).representation(session=session_id, target=user_peer_id)


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
    with _translated():
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
