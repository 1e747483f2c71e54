"""The stand-in's HTTP side: its route table, what a route answers, and a threading server
that can cut its kept-alive connections on stop. What each route does is ``standin.py``'s.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memhoncho.testing.standin_faults import write_trickled

IDLE_CONNECTION_S = 30.0  # seconds a kept-alive connection may sit idle

_W = r"/v3/workspaces/(?P<ws>[^/]+)"
_S = _W + r"/sessions/(?P<sid>[^/]+)"
_P = _W + r"/peers/(?P<pid>[^/]+)"

Route = tuple[str, re.Pattern[str], str, int]


def routes() -> list[Route]:
    """The Honcho v3 routes served: (method, path pattern, the call it names, its status)."""
    table = [
        ("POST", r"/v3/workspaces", "get_or_create_workspace", 200),
        ("PUT", _W, "update_workspace", 200),
        ("POST", _W + r"/peers", "get_or_create_peer", 200),
        ("POST", _W + r"/peers/list", "list_peers", 200),
        ("GET", _P + r"/card", "get_card", 200),
        ("PUT", _P + r"/card", "set_card", 200),
        ("POST", _P + r"/chat", "chat", 200),
        ("POST", _P + r"/representation", "representation", 200),
        ("POST", _P + r"/search", "peer_search", 200),
        ("POST", _W + r"/search", "workspace_search", 200),
        ("POST", _W + r"/sessions", "get_or_create_session", 200),  # 201: created it
        ("POST", _W + r"/sessions/list", "list_sessions", 200),
        ("PUT", _S, "update_session", 200),
        ("DELETE", _S, "delete_session", 202),
        ("POST", _S + r"/clone", "clone_session", 201),
        ("GET", _S + r"/context", "session_context", 200),
        ("GET", _S + r"/peers", "list_session_peers", 200),
        ("POST", _S + r"/peers", "add_session_peers", 200),
        ("PUT", _S + r"/peers", "set_session_peers", 200),
        ("DELETE", _S + r"/peers", "remove_session_peers", 200),
        ("GET", _S + r"/peers/(?P<pid>[^/]+)/config", "get_peer_config", 200),
        ("PUT", _S + r"/peers/(?P<pid>[^/]+)/config", "set_peer_config", 200),
        ("POST", _S + r"/messages", "add_messages", 201),
        ("POST", _S + r"/messages/list", "list_messages", 200),
        ("GET", _S + r"/messages/(?P<mid>[^/]+)", "get_message", 200),
        ("PUT", _S + r"/messages/(?P<mid>[^/]+)", "update_message", 200),
        ("POST", _W + r"/conclusions", "create_conclusions", 201),
        ("POST", _W + r"/conclusions/list", "list_conclusions", 200),
        ("DELETE", _W + r"/conclusions/(?P<cid>[^/]+)", "delete_conclusion", 200),
    ]
    return [(m, re.compile(p + r"/?$"), name, status) for m, p, name, status in table]


class Answer:
    """What a route answers: a status, a JSON value (or raw bytes) and headers."""

    def __init__(
        self,
        status: int,
        payload: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.raw = raw if raw is not None else json.dumps(payload).encode()
        self.content_type = content_type
        self.headers = headers or {}
        self.trickle_s = 0.0  #: seconds the body takes to go out (the "trickle" fault)


#: the stand-in's request handler: (method, target, headers, body) -> its answer, None for none
Handle = Callable[[str, str, Any, bytes], Answer | None]


class Server(ThreadingHTTPServer):
    """Tracks open connections so ``stop`` can cut kept-alive ones too."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.handle: Handle | None = None  # the stand-in's, set by its start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self.connections_lock:
            sockets = list(self.open_connections)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    """One connection: each request goes to the server's ``handle``; None closes it unanswered."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_CONNECTION_S
    server: Server

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in separate writes; without this, Nagle plus delayed
        # ACKs stall every answer by ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: tests read state, not logs."""

    def _serve(self) -> None:
        handle = self.server.handle
        assert handle is not None
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        answer = handle(self.command, self.path, self.headers, raw_body)
        if answer is None:  # a fault: no answer at all
            self.close_connection = True
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.raw)))
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.end_headers()
        write_trickled(self.wfile.write, answer.raw, answer.trickle_s, time.sleep)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
