"""``memhoncho run`` and ``memhoncho relay``: the long-running processes of one machine."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    import argparse

    run = sub.add_parser("run", help="a worker and beat together (one-machine deployment)")
    run.add_argument(
        "--concurrency", type=int, default=2, help="worker processes (celery worker -c)"
    )
    run.add_argument("--loglevel", default="INFO", help="the worker's log level (celery -l)")
    run.set_defaults(handler=run_command)

    relay = sub.add_parser("relay", help="turn new outbox lines into delivery hints")
    relay.add_argument(
        "--init",
        action="store_true",
        help="initialise the data directory if it is not (default: only the default location is"
        " created; a named folder that is not initialised is refused, exit 2)",
    )
    relay.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    relay.set_defaults(handler=relay_command)


def run_command(args: argparse.Namespace) -> int:
    """A worker with beat embedded, and the outbox relay beside them: the one-machine deployment.

    The worker builds its app from ``MEMHONCHO_CONFIG_DIR``/``MEMHONCHO_DATA_DIR`` at import, so
    the folders this command was given travel in the environment (the worker, its pool children,
    the embedded beat and the relay all read them); beat's schedule file goes in the data dir
    too. The relay is a child that exits when the worker (this process, exec'd) does.
    """
    import os
    import subprocess

    from memhoncho.deployment import Deployment, initialise

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    os.environ["MEMHONCHO_CONFIG_DIR"] = str(deployment.config_dir.absolute())
    os.environ["MEMHONCHO_DATA_DIR"] = str(deployment.data_dir.absolute())
    if args.log_format:
        os.environ["MEMHONCHO_LOG_FORMAT"] = args.log_format
    found, written = initialise(deployment.data_dir)  # the first run initialises it
    if written:
        print(f"initialised {deployment.data_dir} (deployment {found['deployment_id']})")
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


def relay_command(args: argparse.Namespace) -> int:
    """Turn new outbox lines into delivery hints until stopped (``memhoncho.capture.relay``), and
    answer ``memhoncho capture`` and ``status`` on the relay's socket (``relay_socket.py``)."""
    import signal

    from memhoncho.capture import relay, relay_server, relay_socket
    from memhoncho.capture.host import Host
    from memhoncho.cli.capture import capture_answer
    from memhoncho.cli.status import status_answer
    from memhoncho.deployment import Deployment
    from memhoncho.integrations.claude_code import handler as claude_code
    from memhoncho.status.warm import WarmStatus

    with Host(args.config_dir, args.data_dir, init=args.init or None) as host:
        # Captures through the socket publish nothing, as the command's own: they leave this
        # relay a request, so one conversation's hints coalesce however they were captured.
        capturing = Host(args.config_dir, args.data_dir, hints=False, init=False)
        warm = WarmStatus(Deployment.from_dirs(args.config_dir, args.data_dir))
        server = relay_server.RelaySocketServer(
            str(host.deployment.config_dir),
            str(host.deployment.data_dir),
            {
                relay_socket.CAPTURE: lambda _, body: capture_answer(capturing.capture, body),
                relay_socket.STATUS: lambda header, _: status_answer(warm, header),
                claude_code.OP: lambda header, body: claude_code.relay_answer(
                    capturing, header, body
                ),
            },
        )
        # SIGTERM (compose, systemd) unwinds, so the socket file is removed on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        # Built now, not in run: it reads the settings once, before the socket answers, so
        # settings broken while it serves are answered as refusals, never end the relay.
        scanner = relay.Relay(host.deployment, host.enqueue_delivery)
        server.start()
        try:
            relay.run(
                host.deployment,
                host.enqueue_delivery,
                exit_with_parent=args.exit_with_parent,
                scanner=scanner,
            )
        finally:
            server.stop()
            capturing.close()
    return 0
