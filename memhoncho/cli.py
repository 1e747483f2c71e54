"""The ``memhoncho`` command. Each subcommand is a small function over a service module.

Add a subcommand by writing ``_cmd_<name>(args) -> int`` and one line in ``_build_parser``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from memhoncho.bench import BENCHMARKS
from memhoncho.errors import MemhonchoError


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(BENCHMARKS[args.name])
    result = module.run(args)
    _print_json(result)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from memhoncho import demo

    return demo.main(args.data_dir, args.honcho_url, args.honcho_key)


def _cmd_run(args: argparse.Namespace) -> int:
    """A worker with beat embedded: the one-machine deployment."""
    import os

    os.execvp(
        sys.executable,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memhoncho.celery_app",
            "worker",
            "-B",
            "-E",
            "-l",
            args.loglevel,
            "-c",
            str(args.concurrency),
        ],
    )
    return 0  # not reached


def _cmd_stand_in(args: argparse.Namespace) -> int:
    from memhoncho.testing import serve

    serve(args.port, host=args.host, llm=args.llm)
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memhoncho", description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", help="default: $MEMHONCHO_CONFIG_DIR")
    parser.add_argument("--data-dir", help="default: $MEMHONCHO_DATA_DIR")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="measure; prints one JSON object")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("--json", action="store_true", help="JSON output (the only format)")
    bench.add_argument("--samples", type=int, default=None, help="override the sample count")
    bench.set_defaults(handler=_cmd_bench)

    demo = sub.add_parser("demo", help="the whole loop end to end on this machine")
    demo.add_argument("--data-dir", default=argparse.SUPPRESS, help="keep the demo's files here")
    demo.add_argument("--honcho-url", help="use this Honcho instead of the local stand-in")
    demo.add_argument("--honcho-key", help="the API key for --honcho-url")
    demo.set_defaults(handler=_cmd_demo)

    run = sub.add_parser("run", help="a worker and beat together (one-machine deployment)")
    run.add_argument("--concurrency", type=int, default=2)
    run.add_argument("--loglevel", default="INFO")
    run.set_defaults(handler=_cmd_run)

    stand_in = sub.add_parser("stand-in", help="serve the Honcho stand-in (a test double)")
    stand_in.add_argument("--port", type=int, default=8000)
    stand_in.add_argument("--host", default="127.0.0.1")
    stand_in.add_argument("--llm", action="store_true", help="answer chat like an LLM would")
    stand_in.set_defaults(handler=_cmd_stand_in)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except MemhonchoError as exc:
        print(f"memhoncho: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
