"""``memhoncho mcp``: its options, and the transport it serves on (stdio, or streamable HTTP).

This module imports nothing heavy: the CLI builds its parser with ``add_arguments`` on every
call, and only ``run`` loads the ``mcp`` SDK. stdout belongs to the protocol on stdio, so
nothing here prints there; memhoncho's logs go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memhoncho.errors import ConfigError, InvalidId

HELP = "serve memory to MCP clients: stdio, or streamable HTTP behind bearer tokens"
DEFAULT_CONVERSATION = "default"
HTTP_PATH = "/mcp"
STDIO_PIPES = ("lean", "sdk")  # how stdio is read and written: pipes.py, or the SDK's files
NO_SDK = "memhoncho mcp needs the MCP SDK: pip install 'memhoncho[mcp]'"


def register(subparsers: Any) -> None:
    """``memhoncho mcp`` on the CLI's subparsers (argparse's ``add_subparsers()``)."""
    parser = subparsers.add_parser("mcp", help=HELP, description=HELP)
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner",
        help="whose memory this server reads and writes (default on stdio: the ownerless "
        "user); on HTTP, the owner of --token-file's token",
    )
    parser.add_argument(
        "--conversation",
        default=DEFAULT_CONVERSATION,
        help="the conversation of a save or prompt that names none (default %(default)s)",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help=f"serve streamable HTTP at http://HOST:PORT{HTTP_PATH} instead of stdio "
        "(a bearer token is required: --tokens-file, or --token-file with --owner)",
    )
    parser.add_argument(
        "--tokens-file", help="HTTP: a file of '<token> <owner>' lines, re-read when it changes"
    )
    parser.add_argument("--token-file", help="HTTP: a file holding the one token of --owner")
    parser.add_argument(
        "--stdio-pipes",
        choices=STDIO_PIPES,
        default=STDIO_PIPES[0],
        help="stdio: the event loop's own pipes (lean, the default), or the MCP SDK's "
        "threaded files (sdk), the fallback where lean pipes misbehave",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until the client hangs up (stdio) or the process is stopped (HTTP)."""
    try:
        import anyio
        import mcp  # noqa: F401  (the extra is installed)
    except ImportError:
        raise ConfigError(NO_SDK) from None

    from memhoncho.capture.host import Host
    from memhoncho.integrations.mcp import auth, scope, server

    # A bad owner or default conversation is refused now, not per call.
    try:
        scope.check_owner(args.owner)
    except InvalidId as exc:
        raise ConfigError(f"--owner: {exc.message}") from None
    scope.scoped(args.owner, args.conversation)
    config_dir = getattr(args, "config_dir", None)
    data_dir = getattr(args, "data_dir", None)
    if args.http is None:
        if args.tokens_file or args.token_file:
            raise ConfigError("--tokens-file and --token-file go with --http")
        owner = args.owner
        with Host(config_dir, data_dir) as host:
            memory = server.Memory(host, lambda: owner, args.conversation)
            anyio.run(_serve_stdio, server.build(memory), args.stdio_pipes == "lean")
        return 0
    host_name, port = parse_address(args.http)
    verifier = auth.OwnerTokens(args.tokens_file, args.token_file, args.owner)
    with Host(config_dir, data_dir) as host:
        memory = server.Memory(host, auth.request_owner, args.conversation)
        app = _http_app(server.build(memory), verifier, host_name, port)
        print(f"memhoncho mcp on http://{_url_host(host_name)}:{port}{HTTP_PATH}", file=sys.stderr)
        _serve_http(app, host_name, port)
    return 0


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ConfigError otherwise."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http must be HOST:PORT, like 127.0.0.1:8766, not {text[:80]!r}")
    return host, int(port)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _serve_stdio(mcp_server: Any, lean: bool) -> None:
    """The SDK's stdio transport over the loop's own pipes (pipes.py), when it can watch them."""
    from mcp.server.stdio import stdio_server

    from memhoncho.integrations.mcp.pipes import lean_stdio

    async with lean_stdio(lean) as pipes:
        stdin, stdout = pipes if pipes is not None else (None, None)
        async with stdio_server(stdin, stdout) as (read_stream, write_stream):
            options = mcp_server.create_initialization_options()
            await mcp_server.run(read_stream, write_stream, options)


def _http_app(mcp_server: Any, verifier: Any, host: str, port: int) -> Any:
    """The SDK's streamable HTTP app behind its own bearer middleware: no valid token, a 401."""
    from mcp.server.auth.settings import AuthSettings

    # The server is a resource server whose tokens the operator issues: no OAuth routes, no
    # protected-resource metadata (resource_server_url None); the issuer names this server.
    auth = AuthSettings(
        issuer_url=f"http://{_url_host(host)}:{port}",
        resource_server_url=None,
    )
    return mcp_server.streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host, auth=auth, token_verifier=verifier
    )


def _serve_http(app: Any, host: str, port: int) -> None:
    """Bind first, so a port in use is the CLI's typed ``ERR_PORT_IN_USE`` (exit 3), not
    uvicorn's own exit 1; then serve on that socket."""
    import socket

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
