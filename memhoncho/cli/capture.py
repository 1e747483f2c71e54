"""``memhoncho capture``: one run made durable from the command line.

``main`` first tries the relay's socket (``capture/relay_socket.py``); ``capture`` here is the
in-process way, and ``capture_answer`` what both print, so the relay answers alike.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from memhoncho.capture import relay_socket
from memhoncho.cli.exits import EXIT_NOT_NOW, EXIT_REFUSED, code_for, os_error

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from memhoncho.errors import MemhonchoError


def register(sub: Any) -> None:
    capture = sub.add_parser(
        "capture",
        help="capture one run (JSON on stdin) durably; prints the CaptureResult as JSON",
        description="Exit 0 with the CaptureResult on stdout; on a refusal the typed error as"
        f" JSON on stderr, exit {EXIT_REFUSED} (the run is invalid: do not retry it) or"
        f" {EXIT_NOT_NOW} (not accepted now: retry later).",
    )
    capture.add_argument("--file", help="read the run from this file (default: stdin)")
    capture.add_argument(
        "--hint", action="store_true", help="publish the delivery hint (default: the relay does)"
    )
    capture.add_argument(
        "--init",
        action="store_true",
        help="initialise the data directory if it is not (default: only the default location is"
        " created; a named folder that is not initialised is refused, exit 2)",
    )
    capture.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """One run as JSON (stdin or ``--file``) made durable; the CaptureResult as JSON on stdout,
    or the typed error as JSON on stderr. Publishes no hint unless ``--hint`` (the relay does).
    """
    from memhoncho.capture.host import Host
    from memhoncho.errors import MemhonchoError

    try:
        raw = relay_socket.cached_stdin()
        if raw is None and args.file:
            with open(args.file, "rb") as source:
                raw = source.read()
        elif raw is None:
            raw = sys.stdin.buffer.read()
        with Host(args.config_dir, args.data_dir, hints=args.hint, init=args.init or None) as host:
            code, out, err = capture_answer(host.capture, raw)
    except OSError as exc:  # the run's file, or the data directory
        code, answer = os_error(exc, "capture")
        print(json.dumps(answer), file=sys.stderr)
        return code
    except MemhonchoError as exc:
        code, out, err = refusal(exc)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def capture_answer(capture: Callable[[Any], Any], raw: bytes) -> relay_socket.Answer:
    """What ``memhoncho capture`` prints for one run, and its exit code: shared by the command
    and the relay's socket, so both answer alike."""
    from memhoncho.errors import InvalidEvent, MemhonchoError

    try:
        try:
            event = json.loads(raw)
        except ValueError:  # the position only: the text may be someone's message
            raise InvalidEvent("the run is not valid JSON") from None
        except RecursionError:  # a run nests a few levels; thousands is hostile
            raise InvalidEvent("the run is nested too deeply to be a run") from None
        result = capture(event)
    except MemhonchoError as exc:
        return refusal(exc)
    return 0, result.model_dump_json() + "\n", ""


def refusal(exc: MemhonchoError) -> relay_socket.Answer:
    return code_for(exc), "", json.dumps(exc.as_dict(), default=str) + "\n"
