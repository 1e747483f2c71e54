"""``memhoncho import PATH``: an export's history into the outbox, exactly once, with its
own dates (``memhoncho/imports``; docs/import.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memhoncho.cli.exits import EXIT_REFUSED, code_for, os_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from memhoncho.cli.progress import Measure
    from memhoncho.imports.extent import Extent
    from memhoncho.imports.runner import Options, Stored, Summary

FORMATS = ("chatgpt", "claude-code", "claude-ai", "jsonl")
FINDING = 1  # some part of the export was broken or some run refused: said in the summary


def register(sub: Any) -> None:
    cmd = sub.add_parser(
        "import",
        help="import an export (ChatGPT, Claude Code, Claude.ai, JSONL) exactly once",
        description="Exit 0 when everything was read; 1 when a part was broken or a run"
        f" refused (each named in the summary; rerun after fixing: nothing is stored twice);"
        f" {EXIT_REFUSED} for an export that cannot be read at all.",
    )
    cmd.add_argument("path", help="the export: a zip, conversations.json, a .jsonl, a folder")
    cmd.add_argument("--format", choices=FORMATS, help="force the format (default: detected)")
    cmd.add_argument("--owner", help="whose history it is (default: ownerless)")
    cmd.add_argument(
        "--since", type=_aware, help="only runs that happened at or after this ISO 8601 time"
    )
    cmd.add_argument("--limit", type=int, help="read at most this many conversations")
    cmd.add_argument(
        "--conversation-prefix",
        default="",
        help="put before every conversation id (default: none)",
    )
    cmd.add_argument("--dry-run", action="store_true", help="count what would be stored")
    cmd.add_argument("--json", action="store_true", help="print the summary as JSON")
    cmd.add_argument(
        "--init", action="store_true", help="initialise the data directory if it is not"
    )
    cmd.set_defaults(handler=command)


def _aware(text: str) -> datetime:
    from memhoncho.models import parse_happened_at

    try:
        return parse_happened_at(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def command(args: argparse.Namespace) -> int:
    from memhoncho.errors import MemhonchoError
    from memhoncho.imports.runner import Options

    options = Options(
        owner=args.owner,
        since=args.since,
        limit=args.limit,
        conversation_prefix=args.conversation_prefix,
        dry_run=args.dry_run,
    )
    drawing = ExitStack()
    progress = None
    if sys.stderr.isatty() and not args.json:  # rich is loaded only to draw
        from memhoncho.cli.progress import byte_bar

        progress = _progress_since(time.monotonic(), drawing.enter_context(byte_bar("import")))
    try:
        with drawing:
            summary = _run(args, options, progress)
    except OSError as exc:
        code, answer = os_error(exc, "import")
        print(json.dumps(answer), file=sys.stderr)
        return code
    except MemhonchoError as exc:
        print(json.dumps(exc.as_dict(), default=str), file=sys.stderr)
        return code_for(exc)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        _print(summary)
    refused = any(k.startswith("refused:") for k in summary.totals)
    return FINDING if summary.broken or refused else 0


def _run(
    args: argparse.Namespace,
    options: Options,
    progress: Callable[[Summary, Extent], None] | None,
) -> Summary:
    from memhoncho.imports.runner import run_import

    if args.dry_run:
        return run_import(None, Path(args.path), args.format, options, progress, _stored(args))
    from memhoncho.capture.host import Host

    with Host(args.config_dir, args.data_dir, hints=False, init=args.init or None) as host:
        return run_import(host, Path(args.path), args.format, options, progress)


def _stored(args: argparse.Namespace) -> Stored | None:
    """A dry run's look at what is stored already; None before the data directory is
    initialised (nothing is stored: every run would be captured)."""
    from memhoncho.deployment import Deployment, identity
    from memhoncho.imports.runner import stored_batches

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    if identity(deployment.data_dir) is None:
        return None
    return stored_batches(deployment.store())


def _progress_since(started: float, measure: Measure) -> Callable[[Summary, Extent], None]:
    def show(summary: Summary, extent: Extent) -> None:
        """The bar, moved per conversation: bytes read of the export (percentage, ETA),
        counts and turns a second."""
        totals = ", ".join(f"{v} {k}" for k, v in sorted(summary.totals.items()))
        turns = sum(summary.totals.values()) - summary.totals.get("broken", 0)
        rate = turns / max(time.monotonic() - started, 1e-6)
        line = f"{len(summary.conversations)} conversations, {rate:,.0f} turns/s: {totals}"
        measure(extent.done(), extent.total, line)

    return show


def _print(summary: Summary) -> None:
    dry = " (dry run: nothing stored)" if summary.dry_run else ""
    print(f"{summary.format} export {summary.path}{dry}")
    print(f"  {len(summary.conversations)} conversations")
    for what, n in sorted(summary.totals.items()):
        print(f"  {n} {what}")
    for broken in summary.broken:
        print(f"  broken at {broken['where']}: {broken['reason']}")
    unnamed = summary.totals.get("broken", 0) - len(summary.broken)
    if unnamed > 0:
        print(f"  ... and {unnamed} more broken parts (the first {len(summary.broken)} named)")
    if summary.broken:
        print("  run the same import again once fixed: what is stored stays stored once")
