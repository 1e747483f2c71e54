"""``memhoncho serve-status``: the status view over HTTP, behind a bearer token.

``GET /v1/ext/memory-honcho/status`` answers the view as JSON and ``GET /metrics`` as Prometheus
text. A request without the right ``Authorization: Bearer <token>`` gets a bare 401 and nothing
else (compared in constant time, against the token read at that request: a rotation applies
at once). The token is ``<config_dir>/secrets.json`` section
``status-token``, else the ``status_token`` setting (``MEMHONCHO_STATUS_TOKEN``); with none the
server refuses to start (``ERR_CONFIG``): an operator chooses the token, memhoncho never
invents one.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memhoncho import settings as settings_module
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.status.render import prometheus
from memhoncho.status.view import StatusReader

log = logging.getLogger(__name__)

STATUS_PATH = "/v1/ext/memory-honcho/status"
METRICS_PATH = "/metrics"
TOKEN_SECTION = "status-token"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_S = 10.0  # seconds a connection may stay silent (a slow client holds no thread)


NO_TOKEN_MESSAGE = (
    "no status token is configured: set secrets.json section status-token or MEMHONCHO_STATUS_TOKEN"
)


def status_token(deployment: Deployment) -> str | None:
    """The stored secret, the ``status_token`` setting, then ``status_token_file``; else None."""
    path = deployment.config_dir / settings_module.SECRETS_FILE
    try:
        stored = json.loads(path.read_bytes()).get(TOKEN_SECTION)
    except (OSError, ValueError, AttributeError):
        stored = None
    if isinstance(stored, dict):
        stored = stored.get("value")
    if isinstance(stored, str) and stored.strip():
        return stored.strip()
    current = deployment.settings()
    setting = current.status_token
    if setting and setting.strip():
        return setting.strip()
    return settings_module.secret_file(current.status_token_file)


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (stdlib signature)
        log.debug("status request", extra={"action": "status_request", "line": format % args})

    timeout = REQUEST_TIMEOUT_S  # a connection that sends nothing for this long is closed

    def _authorized(self) -> bool:
        expected = self.server.token()
        if expected is None:
            return False  # the token was removed: nobody gets in until one is set
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        ok = hmac.compare_digest(given.strip().encode(), expected.encode())
        return ok and scheme.lower() == "bearer"

    def _send(self, status: int, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802  (stdlib name)
        if not self._authorized():
            self._send(401, b"", None)
            return
        path = self.path.split("?", 1)[0]
        if path == STATUS_PATH:
            view = self.server.read()
            body = json.dumps(view, sort_keys=True, default=str).encode()
            self._send(200, body, "application/json")
        elif path == METRICS_PATH:
            self._send(200, prometheus(self.server.read()).encode(), PROMETHEUS_CONTENT_TYPE)
        else:
            self._send(404, b"", None)


class StatusServer(ThreadingHTTPServer):
    """One server, one ``StatusReader`` (its census cache is shared by all requests)."""

    daemon_threads = True

    def __init__(self, deployment: Deployment, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        if status_token(deployment) is None:
            raise ConfigError(NO_TOKEN_MESSAGE)
        self.deployment = deployment
        self.reader = StatusReader(deployment)
        self._read_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    def token(self) -> str | None:
        """The token, read at every request (a rotated file applies at once, the old token
        is refused from then on); None (every request refused) when it cannot be read."""
        try:
            return status_token(self.deployment)
        except ConfigError:
            return None

    def read(self) -> dict[str, Any]:
        with self._read_lock:  # one census at a time; the cache is not thread-safe
            return self.reader.read()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


def serve(deployment: Deployment, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    server = StatusServer(deployment, host, port)
    log.info("status server listening", extra={"action": "status_serving", "url": server.url})
    print(f"memhoncho status on {server.url}{STATUS_PATH} and {server.url}{METRICS_PATH}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
