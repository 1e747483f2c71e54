"""Every export format ``memhoncho import`` reads, delivered by ONE real worker process (the
embedded broker, with the outbox relay a deployment runs beside it) to the stand-in: every
turn once, in order, with its original time, and ``memhoncho audit`` exits 0. Then, with the
same worker: importing again stores nothing new, a longer export only the new turns, an
import killed with SIGKILL half-way and run again stores everything once, and a Claude Code
folder whose sessions the hooks captured first stores nothing twice.

One test of several steps, so the suite pays for one worker start (``test_import_formats``
proves the same readings in process, case by case).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_import_formats import chatgpt_conversations, chatgpt_export

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.imports import claude_code
from memhoncho.testing import HonchoStandIn, exports
from memhoncho.testing import claude_code_transcript as cc
from memhoncho.testing.config import SettingsWriter
from memhoncho.testing.processes import wait_until
from memhoncho.testing.relay import RelayProcess

KEY = "sk-import-workers-key"
OWNER = "ana@example.com"
CRASH_CONVERSATIONS = 40  # the export killed half-way: a JSONL of 40 conversations
CRASH_TURNS = 10
DELIVERY_TIMEOUT_S = 180.0  # seconds for the worker to deliver everything (a loaded machine)
#: seconds between looks at the outbox folder while the victim runs: a quiet machine imports the
#: 40 conversations in about 50 ms, a quarter of them in 12 ms (one fsync each), so a look every
#: 50 ms could see fewer than a quarter and then all of them (a CI run of 76cd0b9 did)
POLL_S = 0.001

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]

#: a conversation's messages as Honcho must hold them: (content, created_at)
Expected = dict[str, list[tuple[str, datetime]]]


@pytest.fixture
def settings(standin_settings: SettingsWriter) -> dict[str, Any]:
    return standin_settings()


def memhoncho(
    deployment: Deployment, *argv: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(deployment.config_dir),
         "--data-dir", str(deployment.data_dir), *argv],
        input=stdin, capture_output=True, timeout=300, check=False,
    )  # fmt: skip


def imported(deployment: Deployment, path: Path, *extra: str) -> dict[str, Any]:
    """``memhoncho import PATH --owner OWNER --json``: its summary (the import exited 0)."""
    done = memhoncho(deployment, "import", str(path), "--owner", OWNER, "--json", *extra)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def at(value: float | str) -> datetime:
    if isinstance(value, float | int):
        return datetime.fromtimestamp(value, tz=UTC)
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def turns(pairs: list[tuple[str, str, float | str]]) -> list[tuple[str, datetime]]:
    """(prompt, answer, when the prompt was said) -> both messages, each with the run's time."""
    return [(words, at(when)) for prompt, answer, when in pairs for words in (prompt, answer)]


# ---- the exports and what each must leave in Honcho ----------------------------------------


def chatgpt_expected(conversations: int, turn_count: int) -> Expected:
    """The current branch only: the image a note, the edited-away prompt and the regenerated
    answer not there, the custom GPT's greeting not there; each turn at its prompt's time."""
    expected: Expected = {}
    for c, conv in enumerate(chatgpt_conversations(conversations, turn_count)):
        said = {n["message"]["content"]["parts"][-1]: n["message"]["create_time"]
                for n in conv["mapping"].values()
                if n["message"] and n["message"]["author"]["role"] == "user"
                and n["message"]["content"].get("parts")}  # fmt: skip
        pairs = [
            (exports.prompt_text(c, t), exports.answer_text(c, t), said[exports.prompt_text(c, t)])
            for t in range(turn_count)
        ]
        if c == 0:
            pairs[0] = ("[image not stored: memhoncho keeps text only]\n" + pairs[0][0],
                        *pairs[0][1:])  # fmt: skip
        expected[f"chatgpt-{conv['id']}"] = turns(pairs)
    return expected


def claude_ai_expected(conversations: list[dict[str, Any]]) -> Expected:
    expected: Expected = {}
    for c, conv in enumerate(conversations):
        said = conv["chat_messages"]
        pairs = [
            (exports.prompt_text(c, t), exports.answer_text(c, t), said[2 * t]["created_at"])
            for t in range(len(said) // 2)
        ]
        expected[f"claude-ai-{conv['uuid']}"] = turns(pairs)
    return expected


def jsonl_expected(conversations: list[dict[str, Any]], prefix: str = "") -> Expected:
    expected: Expected = {}
    for c, conv in enumerate(conversations):
        prompts = [m for m in conv["messages"] if m["role"] == "user"]
        pairs = [
            (exports.prompt_text(c, t), exports.answer_text(c, t), m["timestamp"])
            for t, m in enumerate(prompts)
        ]
        expected[prefix + conv["id"]] = turns(pairs)
    return expected


def prompt_times(t: cc.Transcript) -> dict[str, str]:
    """Each prompt's time as the transcript says it."""
    lines = [json.loads(line) for line in Path(t.path).read_text().splitlines()]
    return {
        line["message"]["content"]: line["timestamp"]
        for line in lines
        if line.get("type") == "user" and isinstance(line["message"]["content"], str)
    }


# ---- delivery -------------------------------------------------------------------------


def held(standin: HonchoStandIn, workspace_id: str, session_id: str) -> list[tuple[str, datetime]]:
    return [(m["content"], at(m["created_at"])) for m in standin.messages(workspace_id, session_id)]


def arrived(
    standin: HonchoStandIn, workspace_id: str, expected: Expected, sessions: dict[str, str]
) -> None:
    """Wait until Honcho holds as many messages as expected, then: exactly those, in order,
    each with its original time. ``sessions``: a conversation's session when not its own."""
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    for conversation, messages in expected.items():
        sid = sessions.get(conversation) or ids.session_id(workspace_id, conversation)
        while len(standin.messages(workspace_id, sid)) < len(messages):
            assert time.monotonic() < deadline, f"{conversation} not delivered"
            time.sleep(0.2)
        assert held(standin, workspace_id, sid) == messages, conversation


def audited(deployment: Deployment, messages: int) -> None:
    """``memhoncho audit --json`` exits 0: every message delivered once, none missing."""
    done = memhoncho(deployment, "audit", "--json")
    assert done.returncode == 0, done.stdout[-2000:]
    totals = json.loads(done.stdout)["totals"]
    assert (totals["delivered"], totals["duplicated"], totals["missing"]) == (messages, 0, 0)


def killed_half_way(deployment: Deployment, export: Path, prefix: str) -> None:
    """``memhoncho import`` SIGKILLed once a quarter of the export's conversations are in the
    outbox (and before all of them are)."""
    outbox = deployment.data_dir / "data" / "outbox"
    before = len(list(outbox.glob("*.jsonl")))
    argv = [sys.executable, "-m", "memhoncho", "--config-dir", str(deployment.config_dir),
            "--data-dir", str(deployment.data_dir), "import", str(export), "--owner", OWNER,
            "--conversation-prefix", prefix]  # fmt: skip
    victim = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    quarter = before + CRASH_CONVERSATIONS // 4
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(outbox.glob("*.jsonl"))) < quarter:
        assert victim.poll() is None, "the import finished before it could be killed"
        time.sleep(POLL_S)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert quarter <= len(list(outbox.glob("*.jsonl"))) < before + CRASH_CONVERSATIONS


# ---- the test ---------------------------------------------------------------------------


def test_every_format_reaches_honcho_through_a_worker_once_in_order_with_its_dates(
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    celery_process: Callable[..., Any],
    tmp_path: Path,
) -> None:
    expected: Expected = {}
    sessions: dict[str, str] = {}

    # A Claude Code project: one session played through the hooks (as Claude Code runs them:
    # JSON on stdin) with a tool call and a subagent, then resumed in a session no hook saw;
    # the subagent's own transcript beside them.
    project = tmp_path / "claude" / "projects" / "-home-ana-shop"
    first = cc.new_session(str(project))

    def hook(t: cc.Transcript, event: str) -> None:
        done = memhoncho(deployment, "claude-code", "hook", "--owner", OWNER,
                         stdin=cc.hook_input(t, event))  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()

    hook(first, "SessionStart")
    first.write(*first.turn("add a cart", "Added.\n\nDone.", tools=1))
    hook(first, "Stop")
    first.write(*first.subagent("find the tests", "they are in tests/"))
    first.write(*first.turn("now the checkout", "Checkout added."))
    hook(first, "Stop")
    hook(first, "SessionEnd")
    later = cc.resumed(first, str(project))
    later.write(*later.turn("and a receipt", "Receipt added."))
    (project / "agent-de30ae5d.jsonl").write_text(Path(first.path).read_text())
    said = prompt_times(first)
    parent = claude_code.conversation_id(first.session_id)
    expected[parent] = turns(
        [("add a cart", "Added.\nDone.", said["add a cart"]),
         ("now the checkout", "Checkout added.", said["now the checkout"])]
    )  # fmt: skip
    folder = imported(deployment, project.parent.parent / "projects")
    assert folder["format"] == "claude-code"
    # the hooked turns and the resume's repeated history: stored once, by the hooks
    assert folder["totals"] == {"captured": 1, "duplicate": 4}

    # ChatGPT (the zip: an edited prompt, a regenerated answer, an image, a custom GPT with a
    # tool call), Claude.ai, the generic JSONL
    (tmp_path / "short").mkdir()
    chatgpt = imported(deployment, chatgpt_export(tmp_path / "short", 3, 3))
    assert (chatgpt["format"], chatgpt["totals"]) == ("chatgpt", {"captured": 9})
    expected.update(chatgpt_expected(3, 3))
    claude_convs = [exports.claude_ai_conversation(c, 2) for c in range(2)]
    claude_ai = exports.write_array(tmp_path / "conversations.json", claude_convs)
    assert imported(deployment, claude_ai)["totals"] == {"captured": 4}
    expected.update(claude_ai_expected(claude_convs))
    lines = [exports.jsonl_conversation(c, 2) for c in range(2)]
    jsonl = exports.write_lines(tmp_path / "history.jsonl", lines)
    assert imported(deployment, jsonl)["totals"] == {"captured": 4}
    expected.update(jsonl_expected(lines))

    # killed with SIGKILL half-way, then run again: everything, once
    crash_lines = [exports.jsonl_conversation(c, CRASH_TURNS) for c in range(CRASH_CONVERSATIONS)]
    crash = exports.write_lines(tmp_path / "crash.jsonl", crash_lines)
    killed_half_way(deployment, crash, "crash-")
    rerun = imported(deployment, crash, "--conversation-prefix", "crash-")["totals"]
    assert rerun["captured"] + rerun["duplicate"] == CRASH_CONVERSATIONS * CRASH_TURNS
    assert rerun["duplicate"] >= (CRASH_CONVERSATIONS // 4 - 1) * CRASH_TURNS
    expected.update(jsonl_expected(crash_lines, "crash-"))

    # one worker (and the relay beside it) delivers it all
    with RelayProcess(deployment.config_dir, deployment.data_dir):
        celery_process("worker", concurrency=1)
        arrived(standin, workspace_id, expected, sessions)
        child = claude_code.conversation_id(later.session_id)
        book = wait_until(
            lambda: (
                (b := deployment.store().read_ledger(ids.conversation_key(child)))
                and b.session_id
                and b
            ),
            "the resumed session's ledger",
            timeout_s=DELIVERY_TIMEOUT_S,
        )
        assert book.fork is not None and book.fork.outcome == "clone"
        sessions[child] = str(book.session_id)  # the clone of the parent's session
        receipt = prompt_times(later)["and a receipt"]
        own = turns([("and a receipt", "Receipt added.", receipt)])
        wait_until(lambda: len(held(standin, workspace_id, sessions[child])) == 6, "the resume")
        # Honcho's clone resets the copied messages' created_at (HONCHO.md, "Clone"): the
        # parent's history in the resumed session carries the clone's time, its own turn its own
        resumed_held = held(standin, workspace_id, sessions[child])
        assert [w for w, _ in resumed_held] == [w for w, _ in [*expected[parent], *own]]
        assert resumed_held[-2:] == own
        audited(deployment, sum(map(len, expected.values())) + len(own))

        # again: nothing new; a longer ChatGPT export: only its new turns
        for path in (project.parent.parent / "projects", claude_ai, jsonl):
            assert set(imported(deployment, path)["totals"]) == {"duplicate"}, path
        longer_dir = tmp_path / "longer"
        longer_dir.mkdir()
        longer = imported(deployment, chatgpt_export(longer_dir, 4, 4))
        assert longer["totals"] == {"duplicate": 9, "captured": 7}
        expected.update(chatgpt_expected(4, 4))
        arrived(standin, workspace_id, expected, sessions)
        audited(deployment, sum(map(len, expected.values())) + len(own))
