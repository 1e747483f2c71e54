"""What each recall tool does against Honcho: search the user's own words, ask about the
user, remember a conclusion about the user.

Each is a plain service function taking ``(deployment, owner, arguments)``; the registry that
names them for the model, validates a call and maps its errors is ``recall.tools``. The owner
(the calling user) always comes from the host, never from the model's arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    CorruptFile,
    HonchoRejected,
    InvalidId,
    InvalidToolCall,
    MemhonchoError,
    StoreError,
)
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY
from memhoncho.privacy import redaction
from memhoncho.recall.arguments import (
    ChatArguments,
    RememberArguments,
    SearchArguments,
    parse_arguments,
)
from memhoncho.settings import Settings
from memhoncho.store.redactions import add_redactions

SEARCH = "honcho_search"
CHAT = "honcho_chat"
REMEMBER = "honcho_remember"

TRUNCATION_MARK = "…"


def honcho_search(deployment: Deployment, owner: str | None, arguments: Any) -> dict[str, Any]:
    """The calling user's own messages matching the query, newest first, trimmed."""
    args = parse_arguments(SEARCH, SearchArguments, arguments)
    current = deployment.settings()
    user = ids.peer_id(owner)
    client = adapter.read_client(deployment.honcho_target(), timeout_s=current.tool_timeout_s)
    try:
        query = _redacted(deployment, current, args.query)
        found = adapter.search_user_messages(client, user, query, limit=current.search_limit)
    except HonchoRejected as exc:
        if exc.status != 404:
            raise
        found = []  # a user Honcho has never seen has written nothing yet
    conversations = _ConversationNames(deployment, current.workspace_id)
    results: list[dict[str, Any]] = []
    seen: set[str] = set()
    for message in found:
        if message.get("peer_id") not in (None, user):
            continue  # author-scoped by Honcho already; never trust that alone
        outbox_id = message.get("metadata", {}).get(OUTBOX_ID_KEY)
        if isinstance(outbox_id, str):
            if outbox_id in seen:
                continue  # the same words, copied into a forked conversation
            seen.add(outbox_id)
        text, truncated = _preview(message.get("content") or "", current.tool_preview_length)
        results.append(
            {
                "text": text,
                "truncated": truncated,
                "conversation_id": conversations.of(message.get("session_id")),
                "created_at": _iso(message.get("created_at")),
            }
        )
    return {
        "results": results,
        "count": len(results),
        "about": "The user's own past messages (their words, not the agent's replies).",
    }


def honcho_chat(deployment: Deployment, owner: str | None, arguments: Any) -> dict[str, Any]:
    """Honcho's dialectic answer about the calling user, from everything the agent knows."""
    args = parse_arguments(CHAT, ChatArguments, arguments)
    current = deployment.settings()
    client = adapter.read_client(deployment.honcho_target(), timeout_s=current.chat_timeout_s)
    answer = adapter.chat(
        client,
        current.agent_peer_id,
        ids.peer_id(owner),
        _redacted(deployment, current, args.query),
        reasoning_level=args.reasoning_level,
        timeout=current.chat_timeout_s,
    )
    return {"answer": answer, "reasoning_level": args.reasoning_level}


def honcho_remember(deployment: Deployment, owner: str | None, arguments: Any) -> dict[str, Any]:
    """A conclusion of the agent about the calling user, tied to a conversation when given."""
    args = parse_arguments(REMEMBER, RememberArguments, arguments)
    current = deployment.settings()
    user = ids.peer_id(owner)
    client = adapter.write_client(deployment.honcho_target(timeout_s=current.tool_timeout_s))
    session_id = None
    note = None
    if args.conversation_id is not None:
        session_id = _owned_session(deployment, current, client, user, args.conversation_id)
        if session_id is None:
            note = (
                "conversation_id is not one of this user's conversations in memory yet, "
                "so this was remembered about the user in general"
            )
    content = _redacted(deployment, current, args.content)
    created = adapter.create_conclusion(
        client, current.agent_peer_id, user, content, session_id=session_id
    )
    result: dict[str, Any] = {
        "remembered": True,
        "scope": "conversation" if session_id is not None else "user",
        "conversation_id": args.conversation_id if session_id is not None else None,
        "conclusion_id": created.get("id"),
    }
    if note is not None:
        result["note"] = note
    return result


def _redacted(deployment: Deployment, current: Settings, text: str) -> str:
    """``text`` with its secrets replaced (``privacy/redaction.py``): a tool's query or
    conclusion reaches Honcho as a captured turn does, so it is redacted the same way, and
    only the number of replacements is kept (the status view's ``redactions``)."""
    clean, found = redaction.redactor(current.redact_patterns).redact(text)
    if found:
        try:
            add_redactions(deployment.layout, found)
        except MemhonchoError:
            pass  # a full disk: the text is redacted all the same
    return clean


def _owned_session(
    deployment: Deployment, current: Settings, client: Any, user: str, conversation_id: str
) -> str | None:
    """The conversation's Honcho session if it exists and the user is in it; else None.

    The ledger knows a forked conversation's (random) session id; membership is asked of
    Honcho, so a conversation id of another user's conversation is treated as unknown.
    """
    try:
        key = ids.conversation_key(conversation_id)
    except InvalidId as exc:
        raise InvalidToolCall(f"memhoncho {REMEMBER}: conversation_id: {exc.message}") from None
    session_id = ids.session_id(current.workspace_id, conversation_id)
    try:
        ledger = deployment.store().read_ledger(key)
    except CorruptFile:
        ledger = None
    if ledger is not None and ledger.session_id:
        session_id = ledger.session_id
    try:
        members = adapter.session_peer_ids(client, session_id)
    except HonchoRejected as exc:
        if exc.status == 404:
            return None
        raise
    return session_id if user in members else None


class _ConversationNames:
    """Honcho session id -> conversation id: from the session id itself, else the ledgers."""

    def __init__(self, deployment: Deployment, workspace_id: str) -> None:
        self.deployment = deployment
        self.prefix = ids.session_id(workspace_id, "x")[:-1]  # "mh<tag>_"
        self._from_ledgers: dict[str, str] | None = None

    def of(self, session_id: object) -> str | None:
        if not isinstance(session_id, str):
            return None
        if session_id.startswith(self.prefix):
            decoded = ids.decode(session_id[len(self.prefix) :])
            if decoded is not None:
                return decoded
        if self._from_ledgers is None:
            self._from_ledgers = dict(self._scan())
        return self._from_ledgers.get(session_id)

    def _scan(self) -> Iterator[tuple[str, str]]:
        store = self.deployment.store()
        try:
            keys = store.ledger_keys()
        except (OSError, StoreError):
            return
        for key in keys:
            try:
                ledger = store.read_ledger(key)
            except (StoreError, OSError):  # CorruptFile among them: skip that one
                continue
            if ledger is not None and ledger.session_id:
                yield ledger.session_id, ledger.conversation_id


def _preview(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK, True


def _iso(value: object) -> str | None:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value) if value is not None else None
