"""The ``memhoncho`` command. Each subcommand is a small function over a service module.

Add a subcommand by writing ``_cmd_<name>(args) -> int`` and one line in ``_build_parser``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from memhoncho.capture import relay_socket

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from memhoncho.errors import MemhonchoError
    from memhoncho.status.warm import WarmStatus


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _print_json(value: Any) -> None:
    print(_json_text(value))


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    from memhoncho.bench import BENCHMARKS
    from memhoncho.cli import progress

    module = importlib.import_module(BENCHMARKS[args.name])
    with progress.spinner(f"bench {args.name}"):
        result = module.run(args)
    _print_json(result)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from memhoncho.cli import demo

    return demo.main(args.data_dir, args.honcho_url, args.honcho_key)


def _cmd_run(args: argparse.Namespace) -> int:
    """A worker with beat embedded, and the outbox relay beside them: the one-machine deployment.

    The worker builds its app from ``MEMHONCHO_CONFIG_DIR``/``MEMHONCHO_DATA_DIR`` at import, so
    the folders this command was given travel in the environment (the worker, its pool children,
    the embedded beat and the relay all read them); beat's schedule file goes in the data dir
    too. The relay is a child that exits when the worker (this process, exec'd) does.
    """
    import os
    import subprocess

    from memhoncho.deployment import Deployment

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    os.environ["MEMHONCHO_CONFIG_DIR"] = str(deployment.config_dir.absolute())
    os.environ["MEMHONCHO_DATA_DIR"] = str(deployment.data_dir.absolute())
    if args.log_format:
        os.environ["MEMHONCHO_LOG_FORMAT"] = args.log_format
    deployment.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = deployment.data_dir.absolute() / "celerybeat-schedule"
    subprocess.Popen([sys.executable, "-m", "memhoncho", "relay", "--exit-with-parent"])
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
            "-s",
            str(schedule),
            "-E",
            "-l",
            args.loglevel,
            "-c",
            str(args.concurrency),
        ],
    )
    return 0  # not reached


# Exit codes of ``memhoncho capture``: the run was refused (do not retry it as it is), or it
# could not be accepted now (retry later: the outbox is full, the disk or settings failed).
EXIT_REFUSED = 2
EXIT_NOT_NOW = 3


def _cmd_capture(args: argparse.Namespace) -> int:
    """One run as JSON (stdin or ``--file``) made durable; the CaptureResult as JSON on stdout,
    or the typed error as JSON on stderr. Publishes no hint unless ``--hint`` (the relay does).
    ``main`` first tries the relay's socket (``relay_socket.py``); this is the in-process way.
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
        with Host(args.config_dir, args.data_dir, hints=args.hint) as host:
            code, out, err = capture_answer(host.capture, raw)
    except OSError as exc:
        print(json.dumps({"code": "ERR_INPUT", "message": exc.strerror}), file=sys.stderr)
        return EXIT_REFUSED
    except MemhonchoError as exc:
        code, out, err = _refusal(exc)
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
        result = capture(event)
    except MemhonchoError as exc:
        return _refusal(exc)
    return 0, result.model_dump_json() + "\n", ""


def _refusal(exc: MemhonchoError) -> relay_socket.Answer:
    from memhoncho.errors import InvalidInput

    code = EXIT_REFUSED if isinstance(exc, InvalidInput) else EXIT_NOT_NOW
    return code, "", json.dumps(exc.as_dict(), default=str) + "\n"


def status_answer(warm: WarmStatus, header: dict[str, Any]) -> relay_socket.Answer:
    """What ``memhoncho status`` prints, from the relay's warm view (``status/warm.py``), drawn
    for the asking command's terminal (``relay_socket.terminal``)."""
    from memhoncho.status import render

    max_age_s = float(header.get("max_age_s", relay_socket.STATUS_MAX_AGE_S))
    if header.get("json"):
        return 0, _json_text(warm.view(max_age_s)) + "\n", ""
    return 0, warm.table(max_age_s, render.style_for(header)), ""


def _cmd_relay(args: argparse.Namespace) -> int:
    """Turn new outbox lines into delivery hints until stopped (``memhoncho.capture.relay``), and
    answer ``memhoncho capture`` and ``status`` on the relay's socket (``relay_socket.py``)."""
    import signal

    from memhoncho.capture import relay
    from memhoncho.capture.host import Host
    from memhoncho.deployment import Deployment
    from memhoncho.status.warm import WarmStatus

    with Host(args.config_dir, args.data_dir) as host:
        # Captures through the socket publish nothing, as the command's own: they leave this
        # relay a request, so one conversation's hints coalesce however they were captured.
        capturing = Host(args.config_dir, args.data_dir, hints=False)
        warm = WarmStatus(Deployment.from_dirs(args.config_dir, args.data_dir))
        server = relay_socket.RelaySocketServer(
            str(host.deployment.config_dir),
            str(host.deployment.data_dir),
            {
                relay_socket.CAPTURE: lambda _, body: capture_answer(capturing.capture, body),
                relay_socket.STATUS: lambda header, _: status_answer(warm, header),
            },
        )
        # SIGTERM (compose, systemd) unwinds, so the socket file is removed on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        server.start()
        try:
            relay.run(
                host.deployment, host.enqueue_delivery, exit_with_parent=args.exit_with_parent
            )
        finally:
            server.stop()
            capturing.close()
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    """Sweep now, as beat would: deliveries enqueued through this host's broker client."""
    from memhoncho.capture.host import Host
    from memhoncho.cli import progress
    from memhoncho.upkeep.sweep import sweep

    with Host(args.config_dir, args.data_dir) as host, progress.bar("sweep") as advance:
        report = sweep(host.deployment, host.enqueue_delivery, progress=advance)
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        print(
            f"swept {report.listed} conversations in {report.duration_s:.3f}s:"
            f" {report.pending} pending ({report.enqueued} enqueued),"
            f" {report.dropped_delivered} delivered records compacted,"
            f" {report.dead_lettered} moved to dead letters,"
            f" {report.quarantined} lines quarantined, {len(report.failures)} failures"
        )
        for failure in report.failures:
            where = failure.conversation_id or failure.conversation_key or "-"
            print(f"  {failure.stage} {where}: {failure.code}: {failure.message}")
    return 1 if report.failures else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    """Dead letters back into the outbox (all, or one conversation's), then enqueue delivery."""
    from memhoncho.capture.host import Host
    from memhoncho.cli import progress
    from memhoncho.upkeep.replay import replay

    with Host(args.config_dir, args.data_dir) as host, progress.bar("replay") as advance:
        report = replay(
            host.deployment, args.conversation, enqueue=host.enqueue_delivery, progress=advance
        )
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        print(
            f"replayed {report.replayed} dead records into the outbox,"
            f" {report.already_present} were already there or delivered, {report.left} left"
        )
    return 1 if report.left else 0


def _cmd_audit(args: argparse.Namespace) -> int:
    """Read-only: is each conversation in Honcho exactly once, in order? Exit 1 if not."""
    from memhoncho.upkeep import audit

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done == total else ""
            print(f"\raudit: {done}/{total} conversations", end=end, file=sys.stderr, flush=True)

    report = audit.audit(_context(args), args.conversation, progress=progress)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(audit.render(report))
    return 0 if report.ok else 1


def _cmd_stand_in(args: argparse.Namespace) -> int:
    from memhoncho.testing import serve

    serve(args.port, host=args.host, llm=args.llm)
    return 0


def _context(args: argparse.Namespace) -> Any:
    from memhoncho.deployment import Deployment

    return Deployment.from_dirs(args.config_dir, getattr(args, "data_dir", None))


def _cmd_status(args: argparse.Namespace) -> int:
    """The status view read in this process: ``main`` first asks a running relay, which
    answers from its warm view (``status/warm.py``) when it is at most ``--max-age`` old."""
    from memhoncho.status import view as status

    view = status.status_view(_context(args))
    if args.json:
        _print_json(view)
    else:
        from memhoncho.status import render

        sys.stdout.write(render.drawn_table(view, render.style_for(relay_socket.terminal())))
    return 0


def _cmd_serve_status(args: argparse.Namespace) -> int:
    from memhoncho.status import http as status_http

    status_http.serve(_context(args), args.host, args.port)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from memhoncho.cli import doctor

    checks = doctor.run_checks(_context(args))
    if args.json:
        _print_json([c.as_dict() for c in checks])
    else:
        print(doctor.render(checks))
    return 1 if doctor.failed(checks) else 0


def _store_url(args: argparse.Namespace) -> str:
    url = args.url or _context(args).settings().store_url
    if not url:
        from memhoncho.errors import ConfigError

        raise ConfigError("no PostgreSQL store: give --url or set store_url")
    return str(url)


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Bring the PostgreSQL store's schema to this memhoncho's version (alembic)."""
    from memhoncho.store import schema

    revision = schema.upgrade(_store_url(args))
    print(f"the store's schema is at {revision}")
    return 0


def _cmd_store_migrate(args: argparse.Namespace) -> int:
    """Copy this data directory's file store into a PostgreSQL store (idempotent)."""
    from memhoncho.errors import ConfigError
    from memhoncho.store import is_postgres, open_store
    from memhoncho.store.files import FileStore
    from memhoncho.store.migrate import migrate
    from memhoncho.store.postgres import PostgresStore

    if not is_postgres(args.to):
        raise ConfigError("--to must be a postgresql:// URL")
    deployment = _context(args)
    source = FileStore(deployment.layout)
    target = open_store(deployment.data_dir, args.to, deployment.settings().store_timeout_s)
    assert isinstance(target, PostgresStore)
    report = migrate(source, target)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(
            f"copied {report.conversations} conversations: {report.ledgers_copied} ledgers"
            f" ({report.ledgers_kept} already there), {report.records_copied} pending records"
            f" ({report.records_present} already there), {report.forks_copied} forks,"
            f" {report.dead_copied} dead letters; {len(report.errors)} problems"
        )
        for error in report.errors:
            print(f"  {error}")
    return 1 if report.errors else 0


def _add_store_commands(sub: Any) -> None:
    """``db upgrade`` and ``store migrate``: the PostgreSQL store's operator commands."""
    db = sub.add_parser("db", help="the PostgreSQL store's schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="migrate the schema to this version (alembic)")
    upgrade.add_argument("--url", help="default: the store_url setting")
    upgrade.set_defaults(handler=_cmd_db_upgrade)
    store = sub.add_parser("store", help="move between stores")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    move = store_sub.add_parser("migrate", help="copy the file store into PostgreSQL")
    move.add_argument("--to", required=True, help="postgresql://user@host/db")
    move.add_argument("--json", action="store_true", help="the report as JSON")
    move.set_defaults(handler=_cmd_store_migrate)
    for nested in (upgrade, move):  # options anywhere, as on every command
        _global_options(nested)


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    """One process's liveness for a container healthcheck (see memhoncho/healthcheck.py)."""
    from memhoncho.cli import healthcheck

    deployment = _context(args)
    if args.what == "beat":
        healthy, why = healthcheck.beat(deployment)
    elif args.what == "relay":
        healthy, why = healthcheck.relay(deployment)
    else:
        healthy, why = healthcheck.status(deployment, args.port)
    print(why)
    return 0 if healthy else 1


def _global_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The options every command takes, before or after the subcommand's name.

    A subcommand's copy defaults to SUPPRESS, so it sets the value only when given and never
    overwrites one given before the subcommand.
    """
    import argparse

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


def _build_parser() -> argparse.ArgumentParser:
    import argparse

    from memhoncho.bench import BENCHMARKS

    parser = argparse.ArgumentParser(prog="memhoncho", description=__doc__.splitlines()[0])
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="measure; prints one JSON object")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("--json", action="store_true", help="JSON output (the only format)")
    bench.add_argument("--samples", type=int, default=None, help="override the sample count")
    bench.add_argument(
        "--store", help="capture, sweep, status: also on PostgreSQL (a scratch database there)"
    )
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

    capture = sub.add_parser(
        "capture",
        help="capture one run (JSON on stdin) durably; prints the CaptureResult as JSON",
        description="Exit 0 with the CaptureResult on stdout; on a refusal the typed error as"
        f" JSON on stderr, exit {EXIT_REFUSED} (the run is invalid: do not retry it) or"
        f" {EXIT_NOT_NOW} (not accepted now: retry later).",
    )
    capture.add_argument("--file", help="read the run from this file instead of stdin")
    capture.add_argument(
        "--hint", action="store_true", help="publish the delivery hint (default: the relay does)"
    )
    capture.set_defaults(handler=_cmd_capture)

    relay = sub.add_parser("relay", help="turn new outbox lines into delivery hints")
    relay.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    relay.set_defaults(handler=_cmd_relay)

    sweep = sub.add_parser("sweep", help="sweep the outboxes now and show what it did")
    sweep.add_argument("--json", action="store_true", help="the sweep report as JSON")
    sweep.set_defaults(handler=_cmd_sweep)

    replay = sub.add_parser("replay", help="move dead letters back into the outbox")
    replay.add_argument("--conversation", help="only this conversation's dead letters")
    replay.add_argument("--json", action="store_true", help="the replay report as JSON")
    replay.set_defaults(handler=_cmd_replay)

    audit = sub.add_parser("audit", help="compare what Honcho holds with the ledgers (read-only)")
    audit.add_argument("--conversation", help="only this conversation")
    audit.add_argument("--json", action="store_true", help="the audit as JSON")
    audit.set_defaults(handler=_cmd_audit)

    stand_in = sub.add_parser("stand-in", help="serve the Honcho stand-in (a test double)")
    stand_in.add_argument("--port", type=int, default=8000)
    stand_in.add_argument("--host", default="127.0.0.1")
    stand_in.add_argument("--llm", action="store_true", help="answer chat like an LLM would")
    stand_in.set_defaults(handler=_cmd_stand_in)

    status = sub.add_parser("status", help="what memhoncho holds and how delivery goes")
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.add_argument(
        "--max-age",
        type=float,
        default=relay_socket.STATUS_MAX_AGE_S,
        metavar="SECONDS",
        help="a running relay answers with its view when at most this old "
        "(default %(default)s; 0: read now); without a relay the view is read in this process",
    )
    status.set_defaults(handler=_cmd_status)

    serve_status = sub.add_parser(
        "serve-status", help="serve the status view and /metrics over HTTP (bearer token)"
    )
    serve_status.add_argument("--host", default="127.0.0.1")
    serve_status.add_argument("--port", type=int, default=8765)
    serve_status.set_defaults(handler=_cmd_serve_status)

    doctor = sub.add_parser("doctor", help="check the deployment; non-zero exit on a failure")
    doctor.add_argument("--json", action="store_true", help="the checks as JSON")
    doctor.set_defaults(handler=_cmd_doctor)

    health = sub.add_parser(
        "healthcheck",
        help="is this host's beat or relay, or the status server, alive (exit 0 or 1)",
    )
    health.add_argument("what", choices=["beat", "relay", "status"])
    health.add_argument("--port", type=int, default=8765, help="the status server's port")
    health.set_defaults(handler=_cmd_healthcheck)
    _add_store_commands(sub)
    from memhoncho.integrations.mcp import command as mcp_command  # loads no MCP SDK

    mcp_command.register(sub)
    for command in sub.choices.values():
        _global_options(command)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    """memhoncho's warnings on stderr with their fields; ``--log-format``, else the setting."""
    from memhoncho import logs

    style = getattr(args, "log_format", None)
    logs.setup_cli(style or logs.TEXT)
    if style is None and args.command != "demo":  # the demo keeps its own folders
        from memhoncho import settings as settings_module

        configured = settings_module.load(getattr(args, "config_dir", None)).log_format
        if configured != logs.TEXT:
            logs.setup_cli(configured)


def main(argv: Sequence[str] | None = None) -> int:
    # A plain capture or status goes to the relay's socket before anything heavy is imported.
    fast = relay_socket.fast_path(list(sys.argv[1:] if argv is None else argv))
    if fast is not None:
        return fast
    from memhoncho.errors import MemhonchoError

    args = _build_parser().parse_args(argv)
    _setup_logging(args)
    try:
        return int(args.handler(args))
    except MemhonchoError as exc:
        print(f"memhoncho: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
