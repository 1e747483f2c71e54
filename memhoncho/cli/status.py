"""``memhoncho status`` and ``serve-status``: the status view, in the terminal or over HTTP."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from memhoncho.capture import relay_socket
from memhoncho.cli.exits import json_text, print_json
from memhoncho.cli.parser import port

if TYPE_CHECKING:
    import argparse

    from memhoncho.status.warm import WarmStatus


def register(sub: Any) -> None:
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
    status.set_defaults(handler=command)

    serve_status = sub.add_parser(
        "serve-status", help="serve the status view and /metrics over HTTP (bearer token)"
    )
    serve_status.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve_status.add_argument("--port", type=port, default=8765, help="the port to listen on")
    serve_status.set_defaults(handler=serve)


def command(args: argparse.Namespace) -> int:
    """The status view read in this process: ``main`` first asks a running relay, which
    answers from its warm view (``status/warm.py``) when it is at most ``--max-age`` old."""
    from memhoncho.deployment import Deployment, open_data_dir
    from memhoncho.status import view as status

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    open_data_dir(deployment.data_dir, init=False)  # a mistyped folder is not an empty one
    view = status.status_view(deployment)
    if args.json:
        print_json(view)
    else:
        from memhoncho.status import render

        sys.stdout.write(render.drawn_table(view, render.style_for(relay_socket.terminal())))
    return 0


def status_answer(warm: WarmStatus, header: dict[str, Any]) -> relay_socket.Answer:
    """What ``memhoncho status`` prints, from the relay's warm view (``status/warm.py``), drawn
    for the asking command's terminal (``relay_socket.terminal``)."""
    import json

    from memhoncho.cli.exits import code_for
    from memhoncho.errors import ConfigError
    from memhoncho.status import render

    try:  # refused as the command refuses it in its own process (main checks first)
        warm.reader.deployment.settings()
    except ConfigError as exc:
        if header.get("json"):
            return code_for(exc), "", json.dumps(exc.as_dict(), default=str) + "\n"
        return code_for(exc), "", f"memhoncho: {exc.code}: {exc.message}\n"
    max_age_s = float(header.get("max_age_s", relay_socket.STATUS_MAX_AGE_S))
    if header.get("json"):
        return 0, json_text(warm.view(max_age_s)) + "\n", ""
    return 0, warm.table(max_age_s, render.style_for(header)), ""


def serve(args: argparse.Namespace) -> int:
    from memhoncho.deployment import Deployment, open_data_dir
    from memhoncho.status import http as status_http

    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    open_data_dir(deployment.data_dir, init=False)  # a mistyped folder is not an empty one
    status_http.serve(deployment, args.host, args.port)
    return 0
