"""The ``memhoncho`` command line in one place: the options every command takes, and the
command groups, each a module of ``memhoncho.cli`` with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NoReturn

#: the command groups, in the order ``--help`` lists them; a new group is one line here
GROUPS = (
    "memhoncho.cli.config",  # init, config show
    "memhoncho.cli.bench",
    "memhoncho.cli.local",  # demo, stand-in
    "memhoncho.cli.relay",  # run, relay
    "memhoncho.cli.capture",
    "memhoncho.cli.imports",  # import
    "memhoncho.cli.upkeep",  # sweep, replay, audit
    "memhoncho.cli.status",  # status, serve-status
    "memhoncho.cli.checks",  # doctor, healthcheck
    "memhoncho.cli.store",  # db upgrade, store migrate
    "memhoncho.integrations.mcp.command",  # mcp (the MCP SDK loads only when it runs)
    "memhoncho.integrations.claude_code.command",  # claude-code install|uninstall|status|hook
)

DESCRIPTION = "memhoncho: durable, ordered, exactly-once delivery of agent runs into Honcho."
EPILOG = (
    "exit codes (every command): 0 success; 1 a finding (audit damage, a failed check);"
    " 2 refused input that will never succeed as it is (a bad run, bad settings: fix it);"
    " 3 a temporary condition (store or broker down, outbox full, port in use: retry);"
    " 64 a usage error. Errors print an ERR_ code and what to do."
    " Settings: flags > MEMHONCHO_* environment > settings file > defaults"
    " (memhoncho config show; docs/configuration.md)."
)


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 for any free one (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {value}")
    return value


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it says it or has none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" not in text
            and default not in (None, False, argparse.SUPPRESS)
            and (action.option_strings or action.nargs in ("?", "*"))
        ):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (sysexits EX_USAGE), not 2: 2 means refused input everywhere."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("epilog", EPILOG)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        from memhoncho.cli.exits import USAGE

        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message} (ERR_USAGE; see --help)\n")


def global_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The options every command takes, before or after the subcommand's name.

    A subcommand's copy defaults to SUPPRESS, so it sets the value only when given and never
    overwrites one given before the subcommand.
    """
    default: Any = None if top else argparse.SUPPRESS
    if "--config-dir" not in parser._option_string_actions:
        parser.add_argument(
            "--config-dir",
            default=default,
            help="where settings/memhoncho.json and secrets.json are"
            " (default: $MEMHONCHO_CONFIG_DIR, else ~/.config/memhoncho)",
        )
    if "--data-dir" not in parser._option_string_actions:
        parser.add_argument(
            "--data-dir",
            default=default,
            help="the deployment's initialised data directory (memhoncho init)"
            " (default: $MEMHONCHO_DATA_DIR, else ~/.local/share/memhoncho)",
        )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default,
        help="log lines as text with a key=value tail (default) or as JSON; "
        "default: the log_format setting",
    )


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser that runs a command (``db upgrade``, not ``db``)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found.extend(_leaves(child) or [child])
    return found


def build() -> argparse.ArgumentParser:
    from memhoncho import __version__

    parser = Parser(prog="memhoncho", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"memhoncho {__version__}")
    global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        importlib.import_module(group).register(sub)
    for command in _leaves(parser):  # options anywhere, as on every command
        global_options(command)
    return parser
