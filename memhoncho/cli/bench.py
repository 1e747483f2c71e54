"""``memhoncho bench <name>``: the measurements ``memhoncho/bench/__init__.py`` registers."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memhoncho.cli.exits import print_json

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    from memhoncho.bench import BENCHMARKS

    bench = sub.add_parser("bench", help="measure; prints one JSON object")
    bench.add_argument("name", choices=sorted(BENCHMARKS), help="the measurement to run")
    bench.add_argument("--json", action="store_true", help="JSON output (the only format)")
    bench.add_argument(
        "--samples",
        type=int,
        default=None,
        help="override the sample count (default: each bench's own)",
    )
    bench.add_argument(
        "--store",
        help="capture, sweep, status: also on PostgreSQL (a scratch database there);"
        " watchdog: this server instead of 127.0.0.1:5432",
    )
    bench.add_argument(
        "--broker", help="deliver: also on this broker (amqp://...), beside Redis, in one run"
    )
    bench.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    from memhoncho.bench import BENCHMARKS
    from memhoncho.cli import progress

    module = importlib.import_module(BENCHMARKS[args.name])
    with progress.spinner(f"bench {args.name}"):
        result = module.run(args)
    print_json(result)
    return 0
