"""The relay's socket, the server half: in the relay, a thread per connection (the wire and
why are in ``relay_socket.py``, the client half, which stays light for the fast path)."""

from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Any

from memhoncho import dirs
from memhoncho.capture.relay_socket import (
    ANSWER_TIMEOUT_S,
    DECLINED,
    MAX_REQUEST_BYTES,
    Answer,
    listening,
    settings_digest,
)
from memhoncho.store.modes import make_dirs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: a fault for tests: the relay SIGKILLs itself after handling a request, before it answers
FAULT_ENV = "MEMHONCHO_FAULT_RELAY_CAPTURE"
KILL_BEFORE_ANSWER = "kill-before-answer"
KILL_BEFORE_CAPTURE = "kill-before-capture"  # ... holding the request, before it handles it


def fault(point: str) -> None:
    """Tests only: the relay dies here, as by ``kill -9``, when ``FAULT_ENV`` names ``point``."""
    if os.environ.get(FAULT_ENV) == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class RelaySocketServer:
    """Serves the commands' requests on the data directory's socket, a thread per connection."""

    def __init__(
        self,
        config_dir: str,
        data_dir: str,
        handlers: Mapping[str, Callable[[dict[str, Any], bytes], Answer]],
    ) -> None:
        self.path = dirs.relay_socket(data_dir)
        self.config_dir = os.path.abspath(config_dir)
        self.data_dir = data_dir
        #: requests declined because the caller's settings were not this relay's
        self.declined_other_settings = 0
        self.handlers = handlers
        self._sock: socket.socket | None = None
        self._thread: Any = None
        self._inode = -1

    def start(self) -> bool:
        """Listen; False (logged) when another relay already serves, or the socket can't be."""
        import logging
        import threading

        log = logging.getLogger(__name__)
        if listening(self.path):
            log.info("relay socket served by another relay", extra={"path": self.path})
            return False
        temporary = f"{self.path}.{os.getpid()}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            make_dirs(os.path.dirname(self.path))
            if os.path.lexists(temporary):
                os.unlink(temporary)
            sock.bind(temporary)  # under a private name until it is 0600, then renamed
            os.chmod(temporary, 0o600)
            sock.listen(64)
            os.replace(temporary, self.path)  # over a stale socket nobody listens on
            self._inode = os.stat(self.path).st_ino  # stop() removes only this file
        except OSError as exc:  # e.g. a path over the 107 bytes AF_UNIX takes
            sock.close()
            try:
                os.unlink(temporary)
            except OSError:
                pass
            log.warning(
                "relay socket not served: capture and status run in their own process",
                extra={"action": "relay_socket_failed", "error": type(exc).__name__},
            )
            return False
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="relay-socket", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop listening and remove the socket (when it is still this relay's)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            if os.stat(self.path).st_ino == self._inode:  # not another relay's since
                os.unlink(self.path)
        except OSError:
            pass
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def _accept(self) -> None:
        import threading

        while (sock := self._sock) is not None:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(ANSWER_TIMEOUT_S)
                data = bytearray()
                while len(data) <= MAX_REQUEST_BYTES and (chunk := conn.recv(65536)):
                    data += chunk
                line, _, body = bytes(data).partition(b"\n")
                header = json.loads(line)
                handler = self.handlers.get(header.get("op"))
                if len(data) > MAX_REQUEST_BYTES or handler is None:
                    answer: Answer = (DECLINED, "", "")  # the command runs it itself
                elif header.get("config_dir") != self.config_dir or header.get(
                    "settings_digest"
                ) != settings_digest(self.config_dir, self.data_dir):
                    # Another configuration, or other settings (an environment variable, a
                    # file changed since): not this relay's to answer.
                    self.declined_other_settings += 1
                    answer = (DECLINED, "", "")
                else:
                    fault(KILL_BEFORE_CAPTURE)
                    answer = handler(header, body)
                    fault(KILL_BEFORE_ANSWER)
                code, out, err = answer
                conn.sendall(json.dumps({"exit": code, "stdout": out, "stderr": err}).encode())
            except (OSError, ValueError, AttributeError):
                return  # the client gone or garbled: it runs in-process
