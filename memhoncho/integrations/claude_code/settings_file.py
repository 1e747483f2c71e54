"""Claude Code's settings, edited for ``memhoncho claude-code install|uninstall|status``.

The hooks go into a ``settings.json`` (the user's ``~/.claude/settings.json``, or a project's
``.claude/settings.json``) in Claude Code's shape::

    {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}

and ``memhoncho mcp`` into the MCP servers (``mcpServers.memhoncho``: the user's
``~/.claude.json``, or the project's ``.mcp.json``). memhoncho's own entries are recognised by
their command (``claude-code hook``) and by the server's name, so installing twice leaves one
set, and uninstalling removes only them: every other key, hook and server stays as it was.
Each file is replaced atomically; a file that is not a JSON object is refused (``ConfigError``)
and left untouched.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memhoncho.errors import ConfigError
from memhoncho.integrations.claude_code.handler import EVENTS
from memhoncho.store import atomic

MARK = "claude-code hook"  # in every hook command memhoncho writes
SERVER = "memhoncho"  # the MCP server's name
HOOK_TIMEOUT_S = 30  # seconds Claude Code gives a hook before it cancels it


@dataclass(frozen=True)
class Places:
    """The two files one install edits."""

    settings: Path
    mcp: Path

    @classmethod
    def of(cls, project: str | None) -> Places:
        if project is not None:
            root = Path(project).expanduser().resolve()
            return cls(root / ".claude" / "settings.json", root / ".mcp.json")
        home = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
        mcp = (
            home / ".claude.json"
            if "CLAUDE_CONFIG_DIR" in os.environ
            else Path.home() / ".claude.json"
        )
        return cls(home / "settings.json", mcp)


def default_owner() -> str:
    """The user's git email, else the login name."""
    try:
        email = subprocess.run(
            ["git", "config", "--get", "user.email"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        email = ""
    if email:
        return email
    import getpass

    return getpass.getuser()


def memhoncho_command() -> list[str]:
    """How Claude Code starts this memhoncho: its console script beside this interpreter,
    else the interpreter with ``-m memhoncho`` (Claude Code's PATH may lack the venv)."""
    script = Path(sys.executable).with_name("memhoncho")
    if script.exists():
        return [str(script)]
    found = shutil.which("memhoncho")
    return [found] if found else [sys.executable, "-m", "memhoncho"]


def hook_command(owner: str, config_dir: str | None, data_dir: str | None) -> str:
    words = [*memhoncho_command(), "claude-code", "hook", "--owner", owner]
    if config_dir:
        words += ["--config-dir", str(Path(config_dir).resolve())]
    if data_dir:
        words += ["--data-dir", str(Path(data_dir).resolve())]
    return shlex.join(words)


def mcp_server(owner: str, config_dir: str | None, data_dir: str | None) -> dict[str, Any]:
    """``memhoncho mcp --owner OWNER`` over stdio (needs ``pip install 'memhoncho[mcp]'``)."""
    command, *args = memhoncho_command()
    for name, value in (("--config-dir", config_dir), ("--data-dir", data_dir)):
        if value:
            args += [name, str(Path(value).resolve())]
    return {"type": "stdio", "command": command, "args": [*args, "mcp", "--owner", owner]}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes() or b"{}")
    except FileNotFoundError:
        return {}
    except ValueError:
        raise ConfigError(f"{path} is not JSON: fix or move it; nothing was changed") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object: nothing was changed")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    atomic.write_bytes(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())


def _write_or_remove(path: Path, data: dict[str, Any]) -> None:
    """``_write``, except that a file memhoncho's entries alone filled is removed, not left
    as ``{}`` (to Claude Code an empty settings file and none are the same)."""
    if data:
        _write(path, data)
    else:
        path.unlink(missing_ok=True)


def _ours(group: object) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(h, dict) and MARK in str(h.get("command", "")) for h in hooks
    )


def _without_ours(settings: dict[str, Any]) -> dict[str, Any]:
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    kept = {}
    for event, groups in hooks.items():
        if isinstance(groups, list):
            groups = [g for g in groups if not _ours(g)]
            if not groups:
                continue
        kept[event] = groups
    result = dict(settings)
    if kept:
        result["hooks"] = kept
    else:
        result.pop("hooks")
    return result


def install(places: Places, command: str, server: dict[str, Any]) -> None:
    """Write the hooks and the MCP server, replacing memhoncho's earlier ones."""
    settings = _without_ours(_read(places.settings))
    mcp = _read(places.mcp)
    hooks = dict(settings.get("hooks") or {})
    for event in EVENTS:
        entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
        hooks[event] = [*(hooks.get(event) or []), {"hooks": [entry]}]
    settings["hooks"] = hooks
    servers = mcp.get("mcpServers")
    mcp["mcpServers"] = {**(servers if isinstance(servers, dict) else {}), SERVER: server}
    _write(places.settings, settings)
    _write(places.mcp, mcp)


def uninstall(places: Places) -> bool:
    """Remove memhoncho's hooks and server; True when there was anything to remove."""
    changed = False
    settings = _read(places.settings)
    cleaned = _without_ours(settings)
    if cleaned != settings:
        _write_or_remove(places.settings, cleaned)
        changed = True
    mcp = _read(places.mcp)
    servers = mcp.get("mcpServers")
    if isinstance(servers, dict) and SERVER in servers:
        rest = {k: v for k, v in servers.items() if k != SERVER}
        mcp = {k: v for k, v in mcp.items() if k != "mcpServers"}
        if rest:
            mcp["mcpServers"] = rest
        _write_or_remove(places.mcp, mcp)
        changed = True
    return changed


def installed(places: Places) -> dict[str, Any]:
    """What is installed: the events with memhoncho's hook, its command, the MCP server."""
    settings = _read(places.settings)
    hooks = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    events: list[str] = []
    commands: set[str] = set()
    for event, groups in (hooks or {}).items():
        for group in groups if isinstance(groups, list) else []:
            if _ours(group):
                events.append(event)
                commands.update(
                    h["command"] for h in group["hooks"] if MARK in str(h.get("command", ""))
                )
    servers = _read(places.mcp).get("mcpServers")
    return {
        "settings_file": str(places.settings),
        "mcp_file": str(places.mcp),
        "events": sorted(set(events)),
        "missing_events": [e for e in EVENTS if e not in events],
        "commands": sorted(commands),
        "mcp_server": servers.get(SERVER) if isinstance(servers, dict) else None,
    }
