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
