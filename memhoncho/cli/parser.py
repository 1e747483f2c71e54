"""The ``memhoncho`` command line in one place: the options every command takes, and the
command groups, each a module of ``memhoncho.cli`` with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

#: the command groups, in the order ``--help`` lists them; a new group is one line here
GROUPS = (
    "memhoncho.cli.bench",
    "memhoncho.cli.local",  # demo, stand-in
    "memhoncho.cli.relay",  # run, relay
    "memhoncho.cli.capture",
    "memhoncho.cli.upkeep",  # sweep, replay, audit
    "memhoncho.cli.status",  # status, serve-status
    "memhoncho.cli.checks",  # doctor, healthcheck
    "memhoncho.cli.store",  # db upgrade, store migrate
)

DESCRIPTION = "memhoncho: durable, ordered, exactly-once delivery of agent runs into Honcho."


def global_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The options every command takes, before or after the subcommand's name.

    A subcommand's copy defaults to SUPPRESS, so it sets the value only when given and never
    overwrites one given before the subcommand.
    """
    default: Any = None if top else argparse.SUPPRESS
    if "--config-dir" not in parser._option_string_actions:
        parser.add_argument("--config-dir", default=default, help="default: $MEMHONCHO_CONFIG_DIR")
    if "--data-dir" not in parser._option_string_actions:
        parser.add_argument("--data-dir", default=default, help="default: $MEMHONCHO_DATA_DIR")
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
    parser = argparse.ArgumentParser(prog="memhoncho", description=DESCRIPTION)
    global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        importlib.import_module(group).register(sub)
    for command in _leaves(parser):  # options anywhere, as on every command
        global_options(command)
    return parser
