"""``memhoncho import`` of exports shaped like the real ones, delivered to the stand-in through
the real SDK: every turn once, in order, with its original time; again: nothing new; a longer
export: only the new turns.

Deliveries run in process here (``deliver_conversation``); ``test_import_workers`` delivers
with real worker processes and kills an import half-way.
"""

from __future__ import annotations

import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.imports import claude_code
from memhoncho.imports.runner import Options, Summary, run_import
from memhoncho.testing import HonchoStandIn, exports
from memhoncho.testing import claude_code_transcript as cc
from memhoncho.testing.config import SettingsWriter

KEY = "sk-import-key"
OWNER = "ana@example.com"

pytestmark = pytest.mark.standin(api_key=KEY)


@pytest.fixture
def settings(standin_settings: SettingsWriter) -> dict[str, Any]:
    return standin_settings()


def stored(standin: HonchoStandIn, workspace_id: str, conversation: str) -> list[dict[str, Any]]:
    return standin.messages(workspace_id, ids.session_id(workspace_id, conversation))


def deliver_all(deployment: Deployment, summary: Summary) -> None:
    for conversation in summary.conversations:
        deliver_conversation(deployment, conversation["conversation_id"])


def at(value: float | str) -> datetime:
    if isinstance(value, float | int):
        return datetime.fromtimestamp(value, tz=UTC)
    return datetime.fromisoformat(value)


def chatgpt_conversations(conversations: int, turns: int) -> list[dict[str, Any]]:
    """An edited prompt, a regenerated answer and an image; a custom GPT with a tool call."""
    return [
        exports.chatgpt_conversation(0, turns, edited=True, regenerated=True, multimodal=True),
        exports.chatgpt_conversation(1, turns, gizmo_id="g-7Xk2PlantHelper", tool=True),
        *(exports.chatgpt_conversation(c, turns) for c in range(2, conversations)),
    ]


def chatgpt_export(tmp_path: Path, conversations: int, turns: int) -> Path:
    """The zip ChatGPT mails: conversations.json beside chat.html and user.json."""
    convs = chatgpt_conversations(conversations, turns)
    json_path = exports.write_array(tmp_path / "conversations.json", convs)
    zipped = tmp_path / f"chatgpt-{conversations}-{turns}.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(json_path, "conversations.json")
        archive.writestr("chat.html", "<html></html>")
        archive.writestr("user.json", '{"id": "user-1"}')
    return zipped


def test_a_chatgpt_export_arrives_on_its_current_branch_once_in_order_with_its_dates(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    summary = run_import(host, chatgpt_export(tmp_path, 3, 3), None, Options(owner=OWNER))
    assert summary.format == "chatgpt"
    assert summary.totals == {"captured": 9}
    deliver_all(deployment, summary)
    for c, conv in enumerate(chatgpt_conversations(3, 3)):
        messages = stored(standin, workspace_id, f"chatgpt-{conv['id']}")
        words = [m["content"] for m in messages]
        expected = []
        for t in range(3):
            expected += [exports.prompt_text(c, t), exports.answer_text(c, t)]
        if c == 0:  # the image is a note; the edited-away prompt and answers are not there
            expected[0] = "[image not stored: memhoncho keeps text only]\n" + expected[0]
        assert words == expected
        said = [n["message"] for n in conv["mapping"].values() if n["message"]]
        prompts = {m["id"]: m["create_time"] for m in said if m["author"]["role"] == "user"}
        for m in messages[::2]:
            run = m["metadata"]["run_id"].removeprefix("cg-")
            assert at(m["created_at"]) == at(prompts[run])
    first = summary.conversations[0]
    assert first["skipped_messages"]["other branch (an edited prompt or a regenerated answer)"] == 3
    assert summary.conversations[1]["skipped_messages"]["assistant text before any prompt"] == 1


def test_importing_again_stores_nothing_and_a_longer_export_only_the_new_turns(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    first = run_import(host, chatgpt_export(tmp_path, 2, 2), None, Options(owner=OWNER))
    deliver_all(deployment, first)
    again = run_import(host, chatgpt_export(tmp_path, 2, 2), None, Options(owner=OWNER))
    assert again.totals == {"duplicate": 4}
    longer = run_import(host, chatgpt_export(tmp_path, 3, 4), None, Options(owner=OWNER))
    assert longer.totals == {"duplicate": 4, "captured": 8}
    deliver_all(deployment, longer)
    for c in range(3):
        conv_id = f"chatgpt-{exports.uid('cg', c)}"
        words = [m["content"] for m in stored(standin, workspace_id, conv_id)]
        assert len(words) == 8 and len(set(words)) == 8
        assert words[-1] == exports.answer_text(c, 3)


def test_a_claude_ai_export_and_a_generic_jsonl_arrive_with_their_dates(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    claude = exports.write_array(
        tmp_path / "conversations.json", [exports.claude_ai_conversation(c, 2) for c in range(2)]
    )
    lines = exports.write_lines(
        tmp_path / "history.jsonl", [exports.jsonl_conversation(c, 2) for c in range(2)]
    )
    for path, fmt, conv in (
        (claude, "claude-ai", exports.claude_ai_conversation(1, 2)),
        (lines, "jsonl", exports.jsonl_conversation(1, 2)),
    ):
        summary = run_import(host, path, None, Options(owner=OWNER))
        assert (summary.format, summary.totals) == (fmt, {"captured": 4})
        deliver_all(deployment, summary)
        conversation = summary.conversations[1]["conversation_id"]
        messages = stored(standin, workspace_id, conversation)
        assert [m["content"] for m in messages] == [
            exports.prompt_text(1, 0),
            exports.answer_text(1, 0),
            exports.prompt_text(1, 1),
            exports.answer_text(1, 1),
        ]
        source = conv.get("chat_messages") or [m for m in conv["messages"] if m["role"] == "user"]
        prompts = [m.get("created_at") or m.get("timestamp") for m in source][
            :: 2 if fmt == "claude-ai" else 1
        ]
        assert [at(m["created_at"]) for m in messages[::2]] == [at(p) for p in prompts]


def test_a_claude_code_folder_is_the_hooks_conversation_its_resume_a_fork_its_subagent_skipped(
    host: Host, deployment: Deployment, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    projects = tmp_path / "projects"
    first = cc.new_session(str(projects / "-home-ana-shop"))
    first.write(*first.turn("add a cart", "Added.\n\nDone.", tools=1))
    first.write(*first.subagent("find the tests", "they are in tests/"))
    first.write(*first.turn("now the checkout", "Checkout added."))
    later = cc.resumed(first, str(projects / "-home-ana-shop"))
    later.write(*later.turn("and a receipt", "Receipt added."))
    agent = projects / "-home-ana-shop" / "agent-de30ae5d.jsonl"
    agent.write_text(Path(first.path).read_text())

    summary = run_import(host, projects, None, Options(owner=OWNER))
    assert summary.format == "claude-code"
    assert summary.totals == {"captured": 3, "duplicate": 2}  # the resume's history: once
    deliver_all(deployment, summary)
    words = [
        m["content"]
        for m in stored(standin, workspace_id, claude_code.conversation_id(first.session_id))
    ]
    assert words == ["add a cart", "Added.\nDone.", "now the checkout", "Checkout added."]
    child_id = claude_code.conversation_id(later.session_id)
    book = deployment.store().read_ledger(ids.conversation_key(child_id))
    assert book is not None and book.fork is not None and book.fork.outcome == "clone"
    child = standin.messages(workspace_id, str(book.session_id))  # the clone's own id
    assert [m["content"] for m in child] == [*words, "and a receipt", "Receipt added."]
    assert at(child[-2]["created_at"]).year == cc.START.year
