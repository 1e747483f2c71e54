"""Exports shaped like the real ones, for tests and benches: ChatGPT's ``conversations.json``
(a message tree per conversation: ``mapping``, ``current_node``, hidden system and custom
instruction messages, tool calls, edited prompts and regenerated answers as side branches,
multimodal parts, custom GPTs' ``gizmo_id``), Claude.ai's ``conversations.json``
(``chat_messages`` with ``sender``, ``text``, ``content`` blocks, ``created_at``) and the
generic JSONL. Ids are derived from a seed, so a longer export repeats a shorter one's.
(Claude Code's folder: ``testing.claude_code_transcript``.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

START = datetime(2023, 3, 14, 9, 30, tzinfo=UTC)
NS = uuid.UUID("6f1c3e8a-2d4b-4c5e-9a7f-0b1d2e3f4a5b")


def uid(*parts: object) -> str:
    return str(uuid.uuid5(NS, "/".join(map(str, parts))))


def prompt_text(conv: int, turn: int) -> str:
    return f"conversation {conv} question {turn}"


def answer_text(conv: int, turn: int) -> str:
    return f"conversation {conv} answer {turn}"


@dataclass
class _Tree:
    """A ChatGPT mapping under construction: nodes chain from the root by parent/children."""

    conv: int
    mapping: dict[str, Any]
    current: str
    clock: datetime

    def add(self, key: str, role: str, content: dict[str, Any], **extra: Any) -> str:
        node_id = uid("cg", self.conv, key)
        self.clock += timedelta(seconds=7)
        message = {
            "id": node_id,
            "author": {"role": role, "name": extra.pop("name", None), "metadata": {}},
            "create_time": self.clock.timestamp(),
            "update_time": None,
            "content": content,
            "status": "finished_successfully",
            "end_turn": True if role == "assistant" else None,
            "weight": 1.0,
            "metadata": extra.pop("metadata", {}),
            "recipient": extra.pop("recipient", "all"),
            "channel": None,
        }
        parent = extra.pop("parent", self.current)
        self.mapping[node_id] = {
            "id": node_id,
            "message": message,
            "parent": parent,
            "children": [],
        }
        self.mapping[parent]["children"].append(node_id)
        self.current = node_id
        return node_id


def text(*parts: Any) -> dict[str, Any]:
    return {"content_type": "text", "parts": list(parts)}


def chatgpt_conversation(
    conv: int,
    turns: int,
    *,
    edited: bool = False,
    regenerated: bool = False,
    multimodal: bool = False,
    gizmo_id: str | None = None,
    tool: bool = False,
) -> dict[str, Any]:
    """One conversation as ChatGPT exports it. ``edited``: turn 1's prompt was edited (the
    first version and its answer stay on a side branch); ``regenerated``: turn 0's answer was
    regenerated (the first answer on a side branch); ``multimodal``: turn 0's prompt has an
    image; ``tool``: turn 0's answer came after a browsing tool call."""
    root = uid("cg", conv, "root")
    clock = START + timedelta(days=conv)
    tree = _Tree(
        conv, {root: {"id": root, "message": None, "parent": None, "children": []}}, root, clock
    )
    hidden = {"is_visually_hidden_from_conversation": True}
    tree.add("system", "system", text(""), metadata=hidden)
    context = {
        "content_type": "user_editable_context",
        "user_profile": "I garden.",
        "user_instructions": "",
    }
    tree.add("context", "user", context, metadata={**hidden, "user_context_message_data": {}})
    if gizmo_id is not None:
        tree.add("greeting", "assistant", text(f"Hi, I am {gizmo_id}."))
    for t in range(turns):
        parts: list[Any] = [prompt_text(conv, t)]
        content = text(*parts)
        if multimodal and t == 0:
            image = {
                "content_type": "image_asset_pointer",
                "asset_pointer": "file-service://file-1",
                "width": 512,
                "height": 512,
            }
            content = {"content_type": "multimodal_text", "parts": [image, prompt_text(conv, t)]}
        if edited and t == 1:
            before = tree.current
            tree.add(f"u{t}-first", "user", text("a first wording, edited away"))
            tree.add(f"a{t}-first", "assistant", text("an answer to the first wording"))
            tree.current = before
        tree.add(f"u{t}", "user", content)
        if tool and t == 0:
            tree.add(
                f"call{t}",
                "assistant",
                {"content_type": "code", "language": "unknown", "text": "search('x')"},
                recipient="browser",
            )
            tree.add(
                f"tool{t}",
                "tool",
                {"content_type": "tether_browsing_display", "result": "found"},
                name="browser",
            )
        if regenerated and t == 0:
            tree.add(f"a{t}-first", "assistant", text("a first answer, regenerated away"))
            tree.current = tree.mapping[tree.current]["parent"]
        tree.add(f"a{t}", "assistant", text(answer_text(conv, t)))
    return {
        "title": f"Conversation {conv}",
        "create_time": clock.timestamp(),
        "update_time": tree.clock.timestamp(),
        "mapping": tree.mapping,
        "moderation_results": [],
        "current_node": tree.current,
        "plugin_ids": None,
        "conversation_id": uid("cg", conv),
        "conversation_template_id": gizmo_id and "g-template",
        "gizmo_id": gizmo_id,
        "is_archived": False,
        "safe_urls": [],
        "default_model_slug": "gpt-4o",
        "id": uid("cg", conv),
    }


def claude_ai_conversation(conv: int, turns: int) -> dict[str, Any]:
    """One conversation as Claude.ai exports it (``chat_messages`` in order)."""
    clock = START + timedelta(days=conv)
    messages = []
    for t in range(turns):
        for sender, words in (("human", prompt_text(conv, t)), ("assistant", answer_text(conv, t))):
            clock += timedelta(seconds=11)
            stamp = clock.isoformat(timespec="microseconds").replace("+00:00", "Z")
            messages.append(
                {
                    "uuid": uid("ca", conv, t, sender),
                    "text": words,
                    "content": [
                        {
                            "start_timestamp": stamp,
                            "stop_timestamp": stamp,
                            "type": "text",
                            "text": words,
                            "citations": [],
                        }
                    ],
                    "sender": sender,
                    "created_at": stamp,
                    "updated_at": stamp,
                    "attachments": [],
                    "files": [],
                }
            )
    return {
        "uuid": uid("ca", conv),
        "name": f"Conversation {conv}",
        "created_at": (START + timedelta(days=conv)).isoformat().replace("+00:00", "Z"),
        "updated_at": clock.isoformat().replace("+00:00", "Z"),
        "account": {"uuid": uid("account")},
        "chat_messages": messages,
    }


def jsonl_conversation(conv: int, turns: int) -> dict[str, Any]:
    clock = START + timedelta(days=conv)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for t in range(turns):
        clock += timedelta(minutes=1)
        messages.append(
            {"role": "user", "content": prompt_text(conv, t), "timestamp": clock.isoformat()}
        )
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": answer_text(conv, t)}],
                "timestamp": clock.timestamp() + 5,
            }
        )
    return {"id": f"jl-{conv}", "messages": messages}


def write_array(path: Path, conversations: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> Path:
    """A ``conversations.json`` written one conversation at a time (a big one never in memory)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[")
        for i, conversation in enumerate(conversations):
            handle.write(("," if i else "") + json.dumps(conversation, ensure_ascii=False))
        handle.write("]")
    return path


def write_lines(path: Path, conversations: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for conversation in conversations:
            handle.write(json.dumps(conversation, ensure_ascii=False) + "\n")
    return path


LONG_ANSWER = "lorem ipsum dolor sit amet " * 740  # about 20,000 characters


def write_big_chatgpt(path: Path, size: int) -> int:
    """A ChatGPT ``conversations.json`` of at least ``size`` bytes: conversations of 10 turns,
    each answer about 20,000 characters (a regenerated one on a side branch), written one at a
    time; the number of conversations written."""
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[")
        while handle.tell() < size:
            conversation = chatgpt_conversation(written, 10, regenerated=True)
            for node in conversation["mapping"].values():
                message = node["message"]
                if message and message["author"]["role"] == "assistant":
                    message["content"]["parts"] = [LONG_ANSWER]
            handle.write(("," if written else "") + json.dumps(conversation))
            written += 1
        handle.write("]")
    return written
