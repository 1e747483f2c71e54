"""Honcho operations as a peer: search, the dialectic, conclusions, the representation.

Thin and typed like ``sessions.py``: plain values in and out, memhoncho errors only.
"""

from __future__ import annotations

from typing import Any, Literal

from honcho import Honcho
from honcho.peer import Peer

from memhoncho.errors import HonchoNoLLM, HonchoUnavailable
from memhoncho.honcho.retry import translated

MAX_SEARCH_LIMIT = 100

ReasoningLevel = Literal["minimal", "low", "medium", "high", "max"]


def search_user_messages(
    client: Honcho, peer_id: str, query: str, limit: int = 10
) -> list[dict[str, Any]]:
    """Messages authored by ``peer_id`` matching ``query``, across the workspace."""
    limit = min(max(limit, 1), MAX_SEARCH_LIMIT)
    with translated():
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
        with translated():
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
    with translated():
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
    with translated():
        return Peer(agent_peer_id, client).representation(session=session_id, target=user_peer_id)
