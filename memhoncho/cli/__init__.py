"""The ``memhoncho`` command: ``main``, and the fast path through the relay's socket.

Everything else is in a module per command group (``config``, ``capture``, ``status``,
``relay``, ``upkeep``, ``checks``, ``store``, ``local``, ``bench``), each with
``register(subparsers)``; ``parser.py`` builds the parser and calls them in ``parser.GROUPS``
order. To add a command group (one small edit): write ``memhoncho/cli/<group>.py`` with
``register`` adding its commands with ``set_defaults(handler=...)`` and a ``help=`` on every
option (heavy imports inside the handlers, so ``--help`` stays cheap), then add
``"memhoncho.cli.<group>"`` to ``parser.GROUPS``. A handler takes the parsed arguments and
returns an exit code from ``exits.py``; a ``MemhonchoError`` it raises is printed and mapped
there (0 ok, 1 finding, 2 refused, 3 temporary, 64 usage).

A plain ``memhoncho capture`` or ``status`` first asks a running relay
(``capture/relay_socket.py``), before anything heavy is imported: this module imports no
argparse, pydantic or settings at import.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from memhoncho.capture import relay_socket

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


#: commands that read no deployment's settings (their own folders, or none)
_UNCONFIGURED = ("demo", "stand-in", "bench")
#: commands that diagnose broken settings instead of refusing them
_DIAGNOSING = ("doctor",)


def _setup_logging(args: argparse.Namespace) -> None:
    """memhoncho's warnings on stderr with their fields; ``--log-format``, else the setting.

    Reading the setting checks the whole settings file first: a command never runs (nor
    writes anything) under settings that were not read (``ConfigError``).
    """
    from memhoncho import logs

    style = getattr(args, "log_format", None)
    logs.setup_cli(style or logs.TEXT)
    if args.command not in _UNCONFIGURED:
        from memhoncho import settings as settings_module
        from memhoncho.errors import ConfigError

        try:
            configured = settings_module.load(getattr(args, "config_dir", None)).log_format
        except ConfigError:
            if args.command not in _DIAGNOSING:
                raise
            return  # doctor reports the broken settings as its failed check
        if style is None and configured != logs.TEXT:
            logs.setup_cli(configured)


def _fail(args: argparse.Namespace, code: int, answer: dict[str, object]) -> int:
    """Print a typed error on stderr: one JSON object for ``--json`` (and capture), else a line."""
    import json

    if getattr(args, "json", False) or args.command == "capture":
        print(json.dumps(answer, default=str), file=sys.stderr)
    else:
        print(f"memhoncho: {answer['code']}: {answer['message']}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:2] == ["claude-code", "hook"]:  # Claude Code's hooks: light, and always 0
        from memhoncho.integrations.claude_code import hook

        if hook.wanted(arguments):
            return hook.main(arguments)
    # A plain capture or status goes to the relay's socket before anything heavy is imported.
    fast = relay_socket.fast_path(arguments)
    if fast is not None:
        return fast
    from memhoncho.cli import exits, parser
    from memhoncho.errors import MemhonchoError

    args = parser.build().parse_args(argv)
    try:
        _setup_logging(args)
        return int(args.handler(args))
    except MemhonchoError as exc:
        return _fail(args, exits.code_for(exc), exc.as_dict())
    except ModuleNotFoundError as exc:
        return _fail(args, exits.REFUSED, exits.missing_module(exc))
    except OSError as exc:
        return _fail(args, *exits.os_error(exc, args.command))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
