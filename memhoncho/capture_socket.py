"""Captures through the warm relay: ``memhoncho capture`` without paying for the imports.

A fresh process that validates a run with pydantic pays more than 3x ``python -c pass`` for the
import alone, so the outbox relay (already running beside the workers) also serves captures on
a UNIX socket in the data directory (``dirs.capture_socket``, mode 0600, removed when it
exits). The command connects, sends the run and prints the relay's answer; the relay answers
only after ``Host.capture`` returned, so the record is fsynced as in-process.

The wire: one request per connection. The client sends a header line (JSON: the config
directory it resolved, so a relay of another configuration is not used), then the run's raw
bytes, then shuts its side down. The relay answers one JSON object ``{"exit", "stdout",
"stderr"}``: exactly what the command would have printed, and its exit code; then closes.

Any failure on the client's side (no socket, nobody listening, another config, the relay gone
before it answered, no answer within ``ANSWER_TIMEOUT_S``) returns None and the command
captures in-process: safe because a capture is idempotent per run id (the same run answers
``duplicate``, exit 0), and the outbox's lock keeps two writers of one conversation apart.

The client half imports only ``json``, ``os``, ``socket`` and ``sys`` (and ``dirs``); the
server half imports the rest when a relay starts it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from memhoncho import dirs

if TYPE_CHECKING:
    from collections.abc import Callable

CONNECT_TIMEOUT_S = 0.5  # a relay that does not accept within this is not used
ANSWER_TIMEOUT_S = 20.0  # a capture is one fsync; past this the command captures itself
#: a larger request is declined unread: the command captures it itself (and refuses it there)
MAX_RUN_BYTES = 64 * 1024 * 1024
#: a fault for tests: the relay SIGKILLs itself after the capture, before it answers
FAULT_ENV = "MEMHONCHO_FAULT_RELAY_CAPTURE"
KILL_BEFORE_ANSWER = "kill-before-answer"
KILL_BEFORE_CAPTURE = "kill-before-capture"  # ... holding the request, before it captures

Answer = tuple[int, str, str]  # exit code, stdout, stderr


# ---- the client: the command's fast path -------------------------------------------------


def fast_capture(argv: list[str]) -> int | None:
    """``memhoncho capture`` through the relay; None when the command must capture itself
    (other options, no relay, no answer). Prints the answer and returns its exit code."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    config, data, path = parsed
    try:
        if path is not None:
            with open(path, "rb") as source:
                raw = source.read()
        else:
            raw = sys.stdin.buffer.read()
    except OSError:
        return None  # the in-process path reads it again and reports the error (ERR_INPUT)
    answer = request(dirs.capture_socket(dirs.data_dir(data)), dirs.config_dir(config), raw)
    if answer is None:
        _stdin_cache[:] = [raw]  # the fallback reads the run from here, not an emptied stdin
        return None
    code, out, err = answer
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    return code


#: the run read by the fast path when it fell back (stdin cannot be read twice)
_stdin_cache: list[bytes] = []


def cached_stdin() -> bytes | None:
    """The run the fast path read from stdin before falling back, once."""
    return _stdin_cache.pop() if _stdin_cache else None


def _parse(argv: list[str]) -> tuple[str | None, str | None, str | None] | None:
    """(config dir, data dir, --file) of a plain ``capture``; None for anything else."""
    values: dict[str, str | None] = {"--config-dir": None, "--data-dir": None, "--file": None}
    command = None
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if name in values or name == "--log-format":
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            if name in values:
                values[name] = value
        elif token == "capture" and command is None:
            command = token
        else:
            return None  # --hint, --help, another command: the full parser decides
        i += 1
    if command is None:
        return None
    return values["--config-dir"], values["--data-dir"], values["--file"]


def request(path: str, config: str, raw: bytes) -> Answer | None:
    """Send one run to the relay at ``path``; its answer, or None when there is none."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(path)
            conn.settimeout(ANSWER_TIMEOUT_S)
            header = json.dumps({"config_dir": os.path.abspath(config)}).encode() + b"\n"
            conn.sendall(header + raw)
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        reply = json.loads(b"".join(chunks))
        answer = (int(reply["exit"]), str(reply["stdout"]), str(reply["stderr"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no relay, or it went away before answering: capture in-process
    if answer[0] < 0:
        return None  # the relay declined (another configuration)
    return answer


def _listening(path: str) -> bool:
    """Whether a process accepts connections on the socket at ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(path)
        return True
    except OSError:
        return False


def _fault(point: str) -> None:
    """Tests only: the relay dies here, as by ``kill -9``, when ``FAULT_ENV`` names ``point``."""
    if os.environ.get(FAULT_ENV) == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


# ---- the server: in the relay ------------------------------------------------------------


class CaptureServer:
    """Serves captures on the data directory's socket, one thread per connection."""

    def __init__(self, config_dir: str, data_dir: str, capture: Callable[[bytes], Answer]) -> None:
        self.path = dirs.capture_socket(data_dir)
        self.config_dir = os.path.abspath(config_dir)
        self.capture = capture
        self._sock: socket.socket | None = None
        self._thread: Any = None
        self._inode = -1

    def start(self) -> bool:
        """Listen; False (logged) when another relay already serves, or the socket can't be."""
        import logging
        import threading

        log = logging.getLogger(__name__)
        if _listening(self.path):
            log.info("capture socket served by another relay", extra={"path": self.path})
            return False
        temporary = f"{self.path}.{os.getpid()}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
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
                "capture socket not served: captures run in their own process",
                extra={"action": "capture_socket_failed", "error": type(exc).__name__},
            )
            return False
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="capture-socket", daemon=True)
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
                while len(data) <= MAX_RUN_BYTES and (chunk := conn.recv(65536)):
                    data += chunk
                header, _, raw = bytes(data).partition(b"\n")
                asked = json.loads(header).get("config_dir")
                if len(data) > MAX_RUN_BYTES:
                    answer: Answer = (-1, "", "")  # not read whole: the command captures it
                elif asked != self.config_dir:
                    answer = (-1, "", "")  # another configuration: not this relay's
                else:
                    _fault(KILL_BEFORE_CAPTURE)
                    answer = self.capture(raw)
                    _fault(KILL_BEFORE_ANSWER)
                code, out, err = answer
                conn.sendall(json.dumps({"exit": code, "stdout": out, "stderr": err}).encode())
            except (OSError, ValueError, AttributeError):
                return  # the client gone or garbled: it captures in-process
