"""``memhoncho demo`` and ``memhoncho stand-in``: memhoncho on this machine alone, for trying."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memhoncho.cli.parser import port

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    import argparse

    demo = sub.add_parser("demo", help="the whole loop end to end on this machine")
    demo.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        help="keep the demo's files here (default: a temporary folder, removed after)",
    )
    demo.add_argument("--honcho-url", help="use this Honcho (default: a local stand-in)")
    demo.add_argument("--honcho-key", help="the API key for --honcho-url")
    demo.set_defaults(handler=demo_command)

    stand_in = sub.add_parser("stand-in", help="serve the Honcho stand-in (a test double)")
    stand_in.add_argument("--port", type=port, default=8000, help="the port to listen on")
    stand_in.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    stand_in.add_argument("--llm", action="store_true", help="answer chat like an LLM would")
    stand_in.set_defaults(handler=stand_in_command)


def demo_command(args: argparse.Namespace) -> int:
    from memhoncho.cli import demo

    return demo.main(args.data_dir, args.honcho_url, args.honcho_key)


def stand_in_command(args: argparse.Namespace) -> int:
    from memhoncho.testing import serve

    serve(args.port, host=args.host, llm=args.llm)
    return 0
