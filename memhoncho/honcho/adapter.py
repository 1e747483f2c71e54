"""The one place memhoncho calls the Honcho SDK: clients, and thin typed operations.

The rest of memhoncho imports this module only; behind it, by concept: ``clients`` (which
Honcho, one client per process and purpose), ``sessions`` (sessions and their messages),
``peers`` (search, dialectic, conclusions, representation), ``deadline`` (one deadline for a
whole request) and ``retry`` (every failure as a memhoncho error, and what to do about it).
"""

from __future__ import annotations

from memhoncho.honcho.clients import HonchoTarget, close_clients, read_client, write_client
from memhoncho.honcho.deadline import environment_proxy, send_by
from memhoncho.honcho.peers import (
    MAX_SEARCH_LIMIT,
    ReasoningLevel,
    chat,
    create_conclusion,
    representation,
    search_user_messages,
)
from memhoncho.honcho.retry import (
    RetryDecision,
    backoff_s,
    classify,
    never_sent,
    proves_nothing_stored,
    proves_refusal,
)
from memhoncho.honcho.sessions import (
    AGENT_PEER_CONFIG,
    FILTER_CHUNK,
    MAX_MESSAGES_PER_CALL,
    PAGE_SIZE,
    SESSION_CONFIGURATION,
    USER_PEER_CONFIG,
    OutgoingMessage,
    add_messages,
    clone_session,
    ensure_session,
    find_outbox_ids,
    find_sessions,
    list_messages,
    session_context,
    session_metadata,
    session_peer_ids,
    set_session_metadata,
)

__all__ = [
    "AGENT_PEER_CONFIG",
    "FILTER_CHUNK",
    "MAX_MESSAGES_PER_CALL",
    "MAX_SEARCH_LIMIT",
    "PAGE_SIZE",
    "SESSION_CONFIGURATION",
    "USER_PEER_CONFIG",
    "HonchoTarget",
    "OutgoingMessage",
    "ReasoningLevel",
    "RetryDecision",
    "add_messages",
    "backoff_s",
    "chat",
    "classify",
    "clone_session",
    "close_clients",
    "create_conclusion",
    "ensure_session",
    "environment_proxy",
    "find_outbox_ids",
    "find_sessions",
    "list_messages",
    "never_sent",
    "proves_nothing_stored",
    "proves_refusal",
    "read_client",
    "representation",
    "search_user_messages",
    "send_by",
    "session_context",
    "session_metadata",
    "session_peer_ids",
    "set_session_metadata",
    "write_client",
]
