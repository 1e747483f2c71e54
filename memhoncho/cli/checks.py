"""``memhoncho doctor`` and ``memhoncho healthcheck``: is this deployment well, and this process.

The checks themselves are in ``doctor.py`` and ``healthcheck.py``, imported when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memhoncho.cli.exits import print_json
from memhoncho.cli.parser import port

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check the deployment; non-zero exit on a failure")
    doctor.add_argument("--json", action="store_true", help="one JSON object: ok, and the checks")
    doctor.set_defaults(handler=doctor_command)

    health = sub.add_parser(
        "healthcheck",
        help="is this host's beat or relay, or the status server, alive (exit 0 or 1)",
    )
    health.add_argument(
        "what", choices=["beat", "relay", "status"], help="the process to check on this host"
    )
    health.add_argument("--port", type=port, default=8765, help="the status server's port")
    health.set_defaults(handler=healthcheck_command)


def doctor_command(args: argparse.Namespace) -> int:
    from memhoncho.cli import doctor
    from memhoncho.deployment import Deployment

    checks = doctor.run_checks(Deployment.from_dirs(args.config_dir, args.data_dir))
    if args.json:
        print_json({"ok": not doctor.failed(checks), "checks": [c.as_dict() for c in checks]})
    else:
        print(doctor.render(checks))
    return 1 if doctor.failed(checks) else 0


def healthcheck_command(args: argparse.Namespace) -> int:
    """One process's liveness for a container healthcheck (see ``healthcheck.py``)."""
    from memhoncho.cli import healthcheck
    from memhoncho.deployment import Deployment

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    if args.what == "beat":
        healthy, why = healthcheck.beat(deployment)
    elif args.what == "relay":
        healthy, why = healthcheck.relay(deployment)
    else:
        healthy, why = healthcheck.status(deployment, args.port)
    print(why)
    return 0 if healthy else 1
