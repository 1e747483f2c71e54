"""``memhoncho claude-code install|uninstall|status|hook``: Claude Code's hooks and MCP server
in its settings, and what they did (``docs/claude-code.md``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    group = sub.add_parser(
        "claude-code", help="give every Claude Code session memory: its hooks and MCP server"
    )
    commands = group.add_subparsers(dest="claude_code_command", required=True)
    where = {
        "help": "one project's .claude/settings.json and .mcp.json (default: the user's"
        " ~/.claude/settings.json and ~/.claude.json)"
    }
    install = commands.add_parser(
        "install", help="write the hooks and the memhoncho MCP server (idempotent)"
    )
    install.add_argument("--project", metavar="DIR", **where)
    install.add_argument(
        "--owner", help="the user the sessions belong to (default: git user.email, else login)"
    )
    install.set_defaults(handler=install_command)
    uninstall = commands.add_parser(
        "uninstall", help="remove memhoncho's hooks and MCP server, nothing else"
    )
    uninstall.add_argument("--project", metavar="DIR", **where)
    uninstall.set_defaults(handler=uninstall_command)
    status = commands.add_parser(
        "status", help="what is installed, the relay, the sessions read, the last hook errors"
    )
    status.add_argument("--project", metavar="DIR", **where)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=status_command)
    hook = commands.add_parser(
        "hook",
        help="the hook Claude Code runs (its JSON on stdin); always exits 0",
        description="Run by Claude Code, not by hand: reads the hook's JSON on stdin, captures"
        " the transcript's finished turns, prints SessionStart's context. Always exits 0.",
    )
    hook.add_argument("--owner", help="the user the session belongs to (default: none)")
    hook.set_defaults(handler=hook_command)


def install_command(args: argparse.Namespace) -> int:
    from memhoncho.integrations.claude_code import settings_file

    places = settings_file.Places.of(args.project)
    owner = args.owner or settings_file.default_owner()
    command = settings_file.hook_command(owner, args.config_dir, args.data_dir)
    settings_file.install(
        places, command, settings_file.mcp_server(owner, args.config_dir, args.data_dir)
    )
    print(f"memhoncho hooks written to {places.settings} (owner {owner})")
    print(f"memhoncho MCP server written to {places.mcp}")
    print("run `memhoncho run` (or compose) so the turns reach Honcho")
    return 0


def uninstall_command(args: argparse.Namespace) -> int:
    from memhoncho.integrations.claude_code import settings_file

    places = settings_file.Places.of(args.project)
    removed = settings_file.uninstall(places)
    print("memhoncho removed from" if removed else "nothing of memhoncho in", places.settings)
    return 0


def status_command(args: argparse.Namespace) -> int:
    from memhoncho import dirs
    from memhoncho.capture import relay_socket
    from memhoncho.integrations.claude_code import cursor, settings_file

    places = settings_file.Places.of(args.project)
    data = dirs.data_dir(args.data_dir)
    sessions = cursor.folder(data) / "sessions"
    view: dict[str, Any] = {
        **settings_file.installed(places),
        "relay": relay_socket.listening(dirs.relay_socket(data)),
        "sessions_read": len(list(sessions.glob("*.json"))) if sessions.is_dir() else 0,
        "last_errors": cursor.last_errors(data),
    }
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    print(f"settings: {view['settings_file']}")
    print(f"  hooks for: {', '.join(view['events']) or 'none'}")
    if view["missing_events"]:
        print(f"  missing: {', '.join(view['missing_events'])} (run memhoncho claude-code install)")
    print(f"mcp server: {'yes' if view['mcp_server'] else 'no'} ({view['mcp_file']})")
    print(f"relay: {'running' if view['relay'] else 'not running: hooks capture in-process'}")
    print(f"sessions read: {view['sessions_read']}")
    for error in view["last_errors"][-5:]:
        print(f"  error: {error['event']}: {error['code']}: {error['message']}")
    return 0


def hook_command(args: argparse.Namespace) -> int:
    """Reached only through the parser (``memhoncho --config-dir X claude-code hook``): the
    same hook as the fast path."""
    from memhoncho.integrations.claude_code import hook

    argv = ["claude-code", "hook"]
    for name, value in (
        ("--owner", args.owner),
        ("--config-dir", args.config_dir),
        ("--data-dir", args.data_dir),
    ):
        if value:
            argv += [name, value]
    return hook.main(argv)
