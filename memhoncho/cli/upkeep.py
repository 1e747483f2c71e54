"""``memhoncho sweep``, ``replay`` and ``audit``: the operator's hands on the store."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from memhoncho.cli.exits import count, print_json

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    sweep = sub.add_parser("sweep", help="sweep the outboxes now and show what it did")
    sweep.add_argument("--json", action="store_true", help="the sweep report as JSON")
    sweep.set_defaults(handler=sweep_command)

    replay = sub.add_parser("replay", help="move dead letters back into the outbox")
    replay.add_argument(
        "--conversation", help="only this conversation's dead letters (default: all)"
    )
    replay.add_argument("--json", action="store_true", help="the replay report as JSON")
    replay.set_defaults(handler=replay_command)

    audit = sub.add_parser("audit", help="compare what Honcho holds with the ledgers (read-only)")
    audit.add_argument("--conversation", help="only this conversation (default: all)")
    audit.add_argument("--json", action="store_true", help="the audit as JSON")
    audit.set_defaults(handler=audit_command)


def sweep_command(args: argparse.Namespace) -> int:
    """Sweep now, as beat would: deliveries enqueued through this host's broker client."""
    from memhoncho.capture.host import Host
    from memhoncho.cli import progress
    from memhoncho.upkeep.sweep import sweep

    host = Host(args.config_dir, args.data_dir, init=False)
    with host, progress.bar("sweep") as advance:
        report = sweep(host.deployment, host.enqueue_delivery, progress=advance)
    summary = (
        f"swept {count(report.listed, 'conversation')} in {report.duration_s:.3f}s:"
        f" {report.pending} pending ({report.enqueued} enqueued),"
        f" {report.dropped_delivered} delivered records compacted,"
        f" {report.dead_lettered} moved to dead letters,"
        f" {report.quarantined} lines quarantined, {count(len(report.failures), 'failure')}"
    )
    failures = [
        f"  {f.stage} {f.conversation_id or f.conversation_key or '-'}: {f.code}: {f.message}"
        for f in report.failures
    ]
    _print_report(args, report.model_dump(mode="json"), [summary, *failures])
    return 1 if report.failures else 0


def replay_command(args: argparse.Namespace) -> int:
    """Dead letters back into the outbox (all, or one conversation's), then enqueue delivery."""
    from memhoncho.capture.host import Host
    from memhoncho.cli import progress
    from memhoncho.upkeep.replay import replay

    host = Host(args.config_dir, args.data_dir, init=False)
    with host, progress.bar("replay") as advance:
        report = replay(
            host.deployment, args.conversation, enqueue=host.enqueue_delivery, progress=advance
        )
    summary = (
        f"replayed {report.replayed} dead records into the outbox,"
        f" {report.already_present} were already there or delivered, {report.left} left"
    )
    _print_report(args, report.model_dump(mode="json"), [summary])
    return 1 if report.left else 0


def audit_command(args: argparse.Namespace) -> int:
    """Read-only: is each conversation in Honcho exactly once, in order? Exit 1 if not."""
    from memhoncho.deployment import Deployment, require_initialised
    from memhoncho.upkeep import audit

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done == total else ""
            print(f"\raudit: {done}/{total} conversations", end=end, file=sys.stderr, flush=True)

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    require_initialised(deployment.data_dir)
    report = audit.audit(deployment, args.conversation, progress=progress)
    _print_report(args, report.as_dict(), [audit.render(report)])
    return 0 if report.ok else 1


def _print_report(args: argparse.Namespace, as_json: Any, lines: list[str]) -> None:
    """A command's report: as JSON with ``--json``, else its text lines."""
    if args.json:
        print_json(as_json)
    else:
        print("\n".join(lines))
