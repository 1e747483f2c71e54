"""The Claude.ai export's ``conversations.json`` read into runs.

Each conversation has a ``uuid`` and ``chat_messages`` in order, each with a ``uuid``, a
``sender`` (``human`` or ``assistant``), ``created_at`` (ISO 8601) and its words in ``text``
or, in newer exports, ``content`` blocks: ``text`` blocks are kept, tool use and results left
out, attachments and files as a note.
"""

from __future__ import annotations

from typing import Any

from memhoncho.imports.model import ASSISTANT, USER, Conversation, Message, pair

FORMAT = "claude-ai"
CONVERSATION_PREFIX = "claude-ai-"
RUN_PREFIX = "ca-"
SENDERS = {"human": USER, "assistant": ASSISTANT}
NOTE = "[{kind} not stored: memhoncho keeps text only]"


def conversation(data: Any, where: str) -> Conversation:
    """One element of ``conversations.json`` (ValueError: not a Claude.ai conversation)."""
    if not isinstance(data, dict) or not isinstance(data.get("chat_messages"), list):
        raise ValueError("not a Claude.ai conversation (no chat_messages)")
    ident = data.get("uuid")
    if not isinstance(ident, str) or not ident:
        raise ValueError("a Claude.ai conversation without a uuid")
    found = Conversation(FORMAT, CONVERSATION_PREFIX + ident, where)
    messages = []
    for index, item in enumerate(data["chat_messages"]):
        role = SENDERS.get(str(item.get("sender"))) if isinstance(item, dict) else None
        if role is None:
            found.skip("message of no known sender")
            continue
        ident = item.get("uuid") or f"{data['uuid']}-{index}"
        messages.append(Message(role, str(ident), _text(item), item.get("created_at")))
    pair(found, messages, RUN_PREFIX)
    return found


def _text(item: dict[str, Any]) -> str | None:
    blocks = item.get("content")
    texts: list[str] = []
    if isinstance(blocks, list) and blocks:
        texts = [b["text"] for b in blocks if b.get("type") == "text" and b.get("text")]
    elif isinstance(item.get("text"), str) and item["text"]:
        texts = [item["text"]]
    for attached in (item.get("attachments") or []) + (item.get("files") or []):
        if isinstance(attached, dict):
            texts.append(NOTE.format(kind="file"))
    return "\n".join(texts) or None
