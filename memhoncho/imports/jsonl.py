"""The generic JSONL export: one conversation per line, OpenAI-style messages.

    {"id": "trip-2023", "messages": [
      {"role": "user", "content": "Where should we go?", "timestamp": "2023-05-01T09:00:00Z"},
      {"role": "assistant", "content": "Lisbon.", "timestamp": 1682931605}]}

``id`` is required (it names the conversation); ``role`` is ``user`` or ``assistant`` (other
roles, ``system`` and ``tool``, are left out); ``content`` a string or a list of parts whose
``text`` parts are kept; ``timestamp`` (or ``created_at``) optional, ISO 8601 with an offset or
Unix seconds; a message's ``id`` optional (else its place in the line names its run).
"""

from __future__ import annotations

from typing import Any

from memhoncho.imports.model import ASSISTANT, USER, Conversation, Message, pair

FORMAT = "jsonl"
RUN_PREFIX = "jl-"


def conversation(data: Any, where: str) -> Conversation:
    """One line's conversation (ValueError: not this shape)."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError("not a conversation line (no messages list)")
    ident = data.get("id")
    if not isinstance(ident, str | int) or isinstance(ident, bool) or ident == "":
        raise ValueError("a conversation line without an id")
    found = Conversation(FORMAT, str(ident), where)
    messages = []
    for index, item in enumerate(data["messages"]):
        role = item.get("role") if isinstance(item, dict) else None
        if role not in (USER, ASSISTANT):
            found.skip(f"{role} message")
            continue
        at = item.get("timestamp", item.get("created_at"))
        messages.append(Message(role, str(item.get("id", index)), _text(item.get("content")), at))
    pair(found, messages, RUN_PREFIX)
    return found


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None
