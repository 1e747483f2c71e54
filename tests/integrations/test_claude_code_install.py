"""``memhoncho claude-code install|uninstall|status`` on Claude Code's settings files, run as a
user runs them: twice leaves one set of hooks, uninstall leaves every other setting as it was."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.integrations.claude_code.handler import EVENTS

USERS_OWN = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm run test:*)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier -w"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
    },
}
USERS_MCP = {"mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": []}}}


def memhoncho(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude" / "settings.json").write_text(json.dumps(USERS_OWN, indent=4))
    (root / ".mcp.json").write_text(json.dumps(USERS_MCP))
    return root


def test_installing_twice_leaves_one_set_of_hooks_and_one_server(project: Path) -> None:
    for _ in range(2):
        done = memhoncho(
            "claude-code", "install", "--project", str(project), "--owner", "ana", cwd=project
        )
        assert done.returncode == 0, done.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    for event in EVENTS:
        ours = [
            g for g in settings["hooks"][event] if "claude-code hook" in g["hooks"][0]["command"]
        ]
        assert len(ours) == 1, event
        assert "--owner ana" in ours[0]["hooks"][0]["command"]
    assert settings["hooks"]["Stop"][0] == USERS_OWN["hooks"]["Stop"][0]  # the user's first
    assert settings["hooks"]["PostToolUse"] == USERS_OWN["hooks"]["PostToolUse"]
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert set(servers) == {"github", "memhoncho"} and servers["memhoncho"]["args"][-3:] == [
        "mcp",
        "--owner",
        "ana",
    ]
    status = memhoncho("claude-code", "status", "--project", str(project), "--json", cwd=project)
    view = json.loads(status.stdout)
    assert view["events"] == sorted(EVENTS) and view["missing_events"] == []
    assert len(view["commands"]) == 1 and view["mcp_server"] is not None


def test_uninstall_leaves_the_users_other_settings_as_they_were(project: Path) -> None:
    memhoncho("claude-code", "install", "--project", str(project), cwd=project)
    done = memhoncho("claude-code", "uninstall", "--project", str(project), cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads((project / ".claude" / "settings.json").read_text()) == USERS_OWN
    assert json.loads((project / ".mcp.json").read_text()) == USERS_MCP


def test_uninstall_removes_the_files_install_created_rather_than_leave_them_empty(
    tmp_path: Path,
) -> None:
    project = tmp_path / "new-project"
    project.mkdir()
    memhoncho("claude-code", "install", "--project", str(project), cwd=project)
    assert (project / ".claude" / "settings.json").exists() and (project / ".mcp.json").exists()
    done = memhoncho("claude-code", "uninstall", "--project", str(project), cwd=project)
    assert done.returncode == 0, done.stderr
    assert not (project / ".claude" / "settings.json").exists()
    assert not (project / ".mcp.json").exists()


def test_a_settings_file_that_is_not_json_is_refused_and_left_untouched(project: Path) -> None:
    broken = project / ".claude" / "settings.json"
    broken.write_text('{"model": "opus",')
    done = memhoncho("claude-code", "install", "--project", str(project), cwd=project)
    assert done.returncode == 2 and "ERR_CONFIG" in done.stderr
    assert broken.read_text() == '{"model": "opus",'
    assert json.loads((project / ".mcp.json").read_text()) == USERS_MCP


# ---- the user's own settings, and the owner's default -----------------------------------------

USERS_STATE = {"numStartups": 41, "projects": {"/home/ana/shop": {"allowedTools": []}}}


def user_env(home: Path, *, email: str | None, login: str = "ana") -> dict[str, str]:
    """A user's environment: HOME, a global git config with ``email`` or without one (no
    system config), the login name; no CLAUDE_CONFIG_DIR."""
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = home / ".gitconfig"
    gitconfig.write_text(f"[user]\n\temail = {email}\n" if email else "[core]\n\tpager = less\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "GIT_DIR")}
    env.update(
        HOME=str(home),
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CEILING_DIRECTORIES=str(home.parent),
        LOGNAME=login,
        USER=login,
    )
    return env


def as_user(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", *args],
        capture_output=True,
        text=True,
        cwd=env["HOME"],
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def owners(settings: Path) -> set[str]:
    """The ``--owner`` of every memhoncho hook command in a settings file."""
    hooks = json.loads(settings.read_text())["hooks"]
    return {
        shlex.split(h["command"])[-1]
        for groups in hooks.values()
        for group in groups
        for h in group["hooks"]
        if "claude-code hook" in h["command"]
    }


@pytest.mark.parametrize(
    ("email", "given", "expected"),
    [
        ("ana@example.com", None, "ana@example.com"),  # the git email
        (None, None, "ana"),  # no git email: the login name
        ("ana@example.com", "ana-shop", "ana-shop"),  # --owner wins
    ],
)
def test_the_owner_is_the_one_given_else_the_git_email_else_the_login_name(
    tmp_path: Path, email: str | None, given: str | None, expected: str
) -> None:
    env = user_env(tmp_path / "home", email=email)
    as_user(env, "claude-code", "install", *(["--owner", given] if given else []))
    assert owners(tmp_path / "home" / ".claude" / "settings.json") == {expected}
    server = json.loads((tmp_path / "home" / ".claude.json").read_text())["mcpServers"]
    assert server["memhoncho"]["args"][-2:] == ["--owner", expected]


def test_a_user_install_edits_the_users_settings_twice_to_one_set_and_uninstall_restores_them(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    env = user_env(home, email="ana@example.com")
    (home / ".claude").mkdir()
    settings, state = home / ".claude" / "settings.json", home / ".claude.json"
    settings.write_text(json.dumps(USERS_OWN))
    state.write_text(json.dumps({**USERS_STATE, **USERS_MCP}))
    for _ in range(2):
        as_user(env, "claude-code", "install")
    written = json.loads(settings.read_text())
    assert {k: v for k, v in written.items() if k != "hooks"} == {
        k: v for k, v in USERS_OWN.items() if k != "hooks"
    }
    for event in EVENTS:
        ours = [g for g in written["hooks"][event] if "claude-code hook" in json.dumps(g)]
        assert len(ours) == 1, event
    assert written["hooks"]["PostToolUse"] == USERS_OWN["hooks"]["PostToolUse"]
    kept = json.loads(state.read_text())
    assert set(kept["mcpServers"]) == {"github", "memhoncho"}
    assert {k: kept[k] for k in USERS_STATE} == USERS_STATE
    view = json.loads(as_user(env, "claude-code", "status", "--json").stdout)
    assert view["settings_file"] == str(settings) and view["missing_events"] == []
    assert not (home / "shop" / ".claude").exists()  # no project was touched

    as_user(env, "claude-code", "uninstall")
    assert json.loads(settings.read_text()) == USERS_OWN
    assert json.loads(state.read_text()) == {**USERS_STATE, **USERS_MCP}


def test_claude_config_dir_moves_the_user_settings_and_the_mcp_servers(tmp_path: Path) -> None:
    env = user_env(tmp_path / "home", email="ana@example.com")
    env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude-config")
    as_user(env, "claude-code", "install")
    assert owners(tmp_path / "claude-config" / "settings.json") == {"ana@example.com"}
    servers = json.loads((tmp_path / "claude-config" / ".claude.json").read_text())["mcpServers"]
    assert set(servers) == {"memhoncho"}
    assert not (tmp_path / "home" / ".claude").exists()
    assert not (tmp_path / "home" / ".claude.json").exists()
    as_user(env, "claude-code", "uninstall")  # what install created alone is removed
    assert not (tmp_path / "claude-config" / "settings.json").exists()
    assert not (tmp_path / "claude-config" / ".claude.json").exists()
