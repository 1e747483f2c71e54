"""The ChatGPT data export (the zip, or its ``conversations.json``) read into runs.

Each conversation is a tree (``mapping``: node -> message, parent, children). memhoncho imports
the branch that ends at ``current_node``: what the user last saw. An edited prompt or a
regenerated answer leaves its other versions on side branches; those are counted as skipped
(``other branch``), not stored, so Honcho holds the conversation as it stands. Kept: user
messages and the assistant's visible text (``recipient`` ``all``, content ``text`` or
``multimodal_text``), image and file parts as a note. Left out: ``system`` and ``tool``
messages, hidden ones (``is_visually_hidden_from_conversation``: custom instructions, a custom
GPT's setup), the assistant's tool calls, code, thoughts and browsing output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memhoncho.imports.model import ASSISTANT, USER, Conversation, Message, pair

FORMAT = "chatgpt"
CONVERSATION_PREFIX = "chatgpt-"
RUN_PREFIX = "cg-"
TEXT_TYPES = ("text", "multimodal_text")
NOTE = "[{kind} not stored: memhoncho keeps text only]"


def conversation(data: Any, where: str) -> Conversation:
    """One element of ``conversations.json`` (ValueError: not a ChatGPT conversation)."""
    if not isinstance(data, dict) or not isinstance(data.get("mapping"), dict):
        raise ValueError("not a ChatGPT conversation (no mapping)")
    ident = data.get("conversation_id") or data.get("id")
    if not isinstance(ident, str) or not ident:
        raise ValueError("a ChatGPT conversation without an id")
    found = Conversation(FORMAT, CONVERSATION_PREFIX + ident, where)
    mapping: dict[str, Any] = data["mapping"]
    branch = list(_branch(mapping, data.get("current_node")))
    found.skip(
        "other branch (an edited prompt or a regenerated answer)", len(mapping) - len(branch)
    )
    default_at = data.get("create_time")
    pair(found, (m for node in branch if (m := _message(found, node, default_at))), RUN_PREFIX)
    return found


def _branch(mapping: dict[str, Any], current: Any) -> Iterator[dict[str, Any]]:
    """The nodes from the root to ``current_node``, in order (cycles cut)."""
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(current, str) and current in mapping and current not in seen:
        seen.add(current)
        node = mapping[current]
        if not isinstance(node, dict):
            break
        path.append(node)
        current = node.get("parent")
    return reversed(path)


def _message(found: Conversation, node: dict[str, Any], default_at: Any) -> Message | None:
    message = node.get("message")
    if not isinstance(message, dict):
        return None  # the root node carries none
    role = (message.get("author") or {}).get("role")
    metadata = message.get("metadata") or {}
    content = message.get("content") or {}
    if role not in (USER, ASSISTANT):
        found.skip(f"{role} message")
        return None
    if metadata.get("is_visually_hidden_from_conversation"):
        found.skip("hidden message")
        return None
    if role == ASSISTANT and message.get("recipient", "all") != "all":
        found.skip("assistant tool call")
        return None
    kind = content.get("content_type")
    if kind not in TEXT_TYPES:
        found.skip(f"{role} {kind} content")
        return None
    at = message.get("create_time")
    ident = message.get("id") or node.get("id")
    return Message(role, str(ident), _text(content.get("parts")), at if at else default_at)


def _text(parts: Any) -> str | None:
    if not isinstance(parts, list):
        return None
    texts = []
    for part in parts:
        if isinstance(part, str):
            if part:
                texts.append(part)
        elif isinstance(part, dict):
            kind = str(part.get("content_type", "attachment"))
            texts.append(NOTE.format(kind="image" if "image" in kind else "file"))
    return "\n".join(texts) or None
