"""Claude Code sessions played through the hooks ``memhoncho claude-code install`` wrote, run
exactly as Claude Code runs them (the settings' command through a shell, the hook's JSON on
stdin, the transcript growing between calls), with a relay and a real worker, Honcho (the
stand-in) down for the whole session and up after: every prompt and final answer lands once
and in order, ``memhoncho audit`` exits 0, hooks killed mid-run double nothing, and a resumed
session continues its parent's conversation instead of storing the history twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.imports.claude_code import conversation_id
from memhoncho.integrations.claude_code import cursor
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.claude_code_transcript import (
    Transcript,
    hook_input,
    installed_command,
    new_session,
    resumed,
    run_hook,
)
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, wait_until
from memhoncho.testing.relay import RelayProcess

pytestmark = pytest.mark.slow

KEY = "sk-claude-code-key"
OWNER = "ana@example.com"


class Session:
    """Claude Code in one project: writes the transcript, runs the hooks."""

    def __init__(self, settings: Path, env: dict[str, str], t: Transcript) -> None:
        self.settings, self.env, self.t = settings, env, t

    def hook(self, event: str) -> subprocess.CompletedProcess[bytes]:
        done = run_hook(self.settings, self.t, event, self.env)
        assert done.returncode == 0, done.stderr
        return done  # type: ignore[no-any-return]

    def turn(self, prompt: str, answer: str, *, tools: int = 0) -> None:
        self.hook("UserPromptSubmit")
        lines = self.t.turn(prompt, answer, tools=tools)
        self.t.write(*lines[:2])
        self.hook("PreCompact")  # mid-turn: nothing of this turn yet
        self.t.write(*lines[2:])
        self.hook("Stop")


def test_sessions_played_through_the_installed_hooks_land_once_in_order(
    tmp_path: Path, config_dir: Path, data_dir: Path, workspace_id: str, redis_url: str
) -> None:
    standin = HonchoStandIn(api_key=KEY, port=free_port()).start()
    point_at_standin(config_dir, standin, workspace_id, KEY, broker_url=redis_url)
    standin.stop()  # Honcho is down for the whole session
    project = tmp_path / "shop"
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    install = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config_dir)]
        + ["--data-dir", str(data_dir), "claude-code", "install", "--project", str(project)]
        + ["--owner", OWNER],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    settings = project / ".claude" / "settings.json"
    hook_env = {k: v for k, v in env.items() if not k.startswith("MEMHONCHO_")}  # the command's
    claude_projects = tmp_path / "claude" / "projects" / "-home-ana-shop"
    worker = CeleryProcess("worker", memhoncho_env(config_dir=config_dir, data_dir=data_dir))
    with RelayProcess(config_dir, data_dir):
        first = Session(settings, hook_env, new_session(str(claude_projects)))
        first.hook("SessionStart")
        first.turn("fix the failing test", "Fixed.\n\nThe fixture leaked a port.", tools=2)
        first.t.write(first.t.image_prompt("what is on this screenshot?"))
        first.t.write(*first.t.subagent("find every use of the port", "Two uses."))
        first.t.write(first.t.assistant({"type": "text", "text": "A stack trace."}))
        first.hook("Stop")
        first.hook("Stop")  # a hook that fires twice stores nothing twice
        first.t.write(*first.t.slash_command("model", "opus"))
        first.hook("PreCompact")
        first.t.write(*first.t.compaction("Ana fixed a test and showed a screenshot."))
        first.turn("now the docs", "Docs updated.", tools=1)
        _killed_hooks(settings, first.t, hook_env)
        for lost in (cursor.folder(data_dir) / "sessions").glob("*.json"):
            lost.unlink()  # a cursor lost in a crash: the turns are read again, stored once
        first.hook("SessionEnd")

        later = Session(settings, hook_env, resumed(first.t, str(claude_projects)))
        later.hook("SessionStart")
        later.turn("one more thing: the changelog", "Changelog written.")
        later.hook("SessionEnd")

        parent, child = conversation_id(first.t.session_id), conversation_id(later.t.session_id)
        assert cursor.last_errors(data_dir) == []
        standin.start()
        worker.start()
        try:
            expected = [
                "fix the failing test",
                "Fixed.\nThe fixture leaked a port.",
                "what is on this screenshot?\n[image not stored: memhoncho keeps text only]",
                "A stack trace.",
                "now the docs",
                "Docs updated.",
            ]
            parent_session = ids.session_id(workspace_id, parent)
            said_at = [
                json.loads(line)["timestamp"]
                for line in Path(first.t.path).read_text().splitlines()
                if json.loads(line).get("message", {}).get("content") == "fix the failing test"
            ]
            wait_until(
                lambda: _texts(standin, workspace_id, parent_session) == expected,
                "the first session's turns in Honcho",
                timeout_s=240,
            )
            child_texts = wait_until(
                lambda: _child_texts(standin, workspace_id, parent_session, child),
                "the resumed session in Honcho",
                timeout_s=240,
            )
            audit = subprocess.run(
                [sys.executable, "-m", "memhoncho", "audit", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            worker.stop()
            standin.stop()
    sessions = standin.state()["workspaces"][workspace_id]["sessions"]
    assert sessions[parent_session]["metadata"] == {"source": "claude-code", "project": first.t.cwd}
    held = standin.messages(workspace_id, parent_session)
    assert held[0]["created_at"].startswith(said_at[0][:19])  # the transcript's own time
    assert child_texts == [*expected, "one more thing: the changelog", "Changelog written."]
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["ok"] is True
    for conversation in report["conversations"]:
        assert conversation["duplicated"] == {}


def _killed_hooks(settings: Path, t: Transcript, env: dict[str, str]) -> None:
    """Hooks killed at staggered moments of their run, and a cursor lost with them."""
    command = installed_command(settings, "Stop")
    for delay in (0.0, 0.05, 0.1, 0.2):
        proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(hook_input(t, "Stop"))
        proc.stdin.close()
        time.sleep(delay)  # a kill at some moment of the hook's run: any moment must do
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _texts(standin: HonchoStandIn, workspace_id: str, session_id: str) -> list[str]:
    return [m["content"] for m in standin.messages(workspace_id, session_id)]


def _child_texts(
    standin: HonchoStandIn, workspace_id: str, parent_session: str, child: str
) -> list[str] | None:
    """The resumed conversation's messages, once its clone of the parent and its own turn are
    in Honcho (its session id is the clone's: found by the child's turn)."""
    state: dict[str, Any] = standin.state()["workspaces"].get(workspace_id, {})
    for sid in state.get("sessions", {}):
        if sid == parent_session:
            continue
        texts = _texts(standin, workspace_id, sid)
        if texts and texts[-1] == "Changelog written.":
            return texts
    return None
