"""The relay's socket: ``memhoncho capture`` and ``memhoncho status`` without paying the imports.

A fresh process that validates a run with pydantic, or reads the census of 10k outboxes, pays
many times ``python -c pass``. The outbox relay already runs warm beside the workers, so it
also answers these two commands on a UNIX socket in the data directory (``dirs.relay_socket``,
mode 0600, removed when it exits). The command connects, sends its request, prints the relay's
answer and exits with its code; the relay answers a capture only after ``Host.capture``
returned, so the record is fsynced as in-process.

The relay answers only for its own deployment: the header carries the config directory the
command resolved and ``settings_digest``, a hash of everything the command's effective settings
come from (the settings and secrets files' bytes, the ``MEMHONCHO_*`` environment, both
folders, memhoncho's version), computed without pydantic; a relay whose own digest differs
declines, and the command captures under its own settings in its own process.

The wire: one request per connection. The client sends a header line (JSON: ``op``, the config
directory it resolved, its settings digest, and the op's options),
then the body (a capture's raw run; nothing for status), then shuts its side down. The relay
answers one JSON object ``{"exit", "stdout", "stderr"}``: exactly what the command would have
printed, and its exit code; then closes. An exit code below 0 declines the request (another
configuration, an unknown op, a run too large to read whole).

Any failure on the client's side (no socket, nobody listening, a decline, the relay gone before
it answered, no answer within ``ANSWER_TIMEOUT_S``) returns None and the command runs in-process:
safe for capture because it is idempotent per run id (the same run answers ``duplicate``, exit
0) and the outbox's lock keeps two writers of one conversation apart; status only reads.

The client half imports only ``json``, ``os``, ``socket`` and ``sys`` (and ``dirs``); the server
half (``relay_server.py``) imports the rest when a relay starts it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from memhoncho import dirs

if TYPE_CHECKING:
    from collections.abc import Mapping

CONNECT_TIMEOUT_S = 0.5  # a relay that does not accept within this is not used
ANSWER_TIMEOUT_S = 20.0  # a capture is one fsync; past this the command runs itself
#: a larger request is declined unread: the command captures it itself (and refuses it there)
MAX_REQUEST_BYTES = 64 * 1024 * 1024

CAPTURE, STATUS = "capture", "status"
DECLINED = -1

Answer = tuple[int, str, str]  # exit code, stdout, stderr
#: seconds: ``memhoncho status`` takes the relay's view when it is at most this old
STATUS_MAX_AGE_S = 2.0

#: the options each command may take on the fast path: name -> takes a value
_OPTIONS = {
    CAPTURE: {"--file": True},
    STATUS: {"--json": False, "--max-age": True},
}
_GLOBAL_OPTIONS = ("--config-dir", "--data-dir", "--log-format")


#: ``MEMHONCHO_*`` variables that change nothing a capture or status answer holds (the folders
#: are hashed resolved; log lines are not in an answer; faults and test places are for tests)
_NOT_SETTINGS = ("MEMHONCHO_CONFIG_DIR", "MEMHONCHO_DATA_DIR", "MEMHONCHO_LOG_FORMAT")
_NOT_SETTINGS_PREFIXES = ("MEMHONCHO_FAULT_", "MEMHONCHO_TEST_", "MEMHONCHO_BENCH_")
_SETTINGS_FILES = (os.path.join("settings", "memhoncho.json"), "secrets.json")


def settings_digest(config: str, data: str, environ: Mapping[str, str] | None = None) -> str:
    """A hash of what a process's effective settings come from, cheap enough for the fast
    path: the config and data folders (absolute), the bytes of the settings and secrets files,
    every ``MEMHONCHO_*`` variable that can be a setting, and memhoncho's version. Two
    processes with one digest read the same settings; any difference (even one that changes
    nothing) only sends the command to its own process."""
    from memhoncho import __version__

    digest = hashlib.sha256(f"{__version__}\0{os.path.abspath(config)}\0".encode())
    digest.update(f"{os.path.abspath(data)}\0".encode())
    for name in _SETTINGS_FILES:
        try:
            with open(os.path.join(config, name), "rb") as handle:
                digest.update(b"file\0" + handle.read() + b"\0")
        except FileNotFoundError:
            digest.update(b"absent\0")
        except OSError as exc:
            digest.update(f"unreadable {exc.errno}\0".encode())
    env = os.environ if environ is None else environ
    for name in sorted(env):
        if (
            name.startswith("MEMHONCHO_")
            and name not in _NOT_SETTINGS
            and not name.startswith(_NOT_SETTINGS_PREFIXES)
        ):
            digest.update(f"{name}={env[name]}\0".encode())
    return digest.hexdigest()


# ---- the client: the commands' fast path -------------------------------------------------


def fast_path(argv: list[str]) -> int | None:
    """``memhoncho capture`` or ``status`` through the relay; None when the command must run
    in-process (other options, no relay, no answer). Prints the answer, returns its exit code."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    command, options, flags = parsed
    header: dict[str, Any] = {"op": command}
    body = b""
    if command == CAPTURE:
        try:
            if "--file" in options:
                with open(options["--file"], "rb") as source:
                    body = source.read()
            else:
                body = sys.stdin.buffer.read()
        except OSError:
            return None  # the in-process path reads it again and reports the error (ERR_INPUT)
    else:
        try:
            max_age = float(options.get("--max-age") or STATUS_MAX_AGE_S)
        except ValueError:
            return None  # the full parser refuses it
        header.update(json="--json" in flags, max_age_s=max_age, **terminal())
    config = dirs.config_dir(options.get("--config-dir"))
    data = dirs.data_dir(options.get("--data-dir"))
    header["settings_digest"] = settings_digest(config, data)
    answer = request(dirs.relay_socket(data), config, header, body)
    if answer is None:
        if command == CAPTURE:
            _stdin_cache[:] = [body]  # the fallback reads the run from here, not an emptied stdin
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


def terminal() -> dict[str, Any]:
    """How this process's stdout draws a table: the relay renders it for this terminal, not
    its own (``rich`` would look at the relay's stdout and environment)."""
    is_terminal = sys.stdout.isatty()
    try:
        width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(1).columns
    except (ValueError, OSError):
        width = 0  # not a terminal: the table's own width
    color = (
        is_terminal and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
    ) or bool(os.environ.get("FORCE_COLOR"))
    return {"terminal": is_terminal, "width": width, "color": color}


def _parse(argv: list[str]) -> tuple[str, dict[str, str], set[str]] | None:
    """(command, options with a value, flags) of a plain ``capture`` or ``status``; None for
    anything else."""
    options: dict[str, str] = {}
    flags: set[str] = set()
    command: str | None = None
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        allowed = _OPTIONS.get(command or "", {})
        if name in _GLOBAL_OPTIONS or allowed.get(name):
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            options[name] = value
        elif name in allowed and not eq:
            flags.add(name)
        elif token in _OPTIONS and command is None:
            command = token
        else:
            return None  # --hint, --help, another command: the full parser decides
        i += 1
    if command is None:
        return None
    return command, options, flags


def relay_uids(path: str) -> set[int]:
    """Who may serve the relay at ``path``: this process's user and the owner of the data
    directory (``path`` is ``<data>/state/relay.sock``): the deployment, never another member
    of a group that may write ``state/`` (narrower than ``store/modes.trusted_uids``, which
    takes the group's files in the shared layout; this module stays off pathlib and pwd)."""
    uids = {os.geteuid()}
    try:
        uids.add(os.stat(os.path.dirname(os.path.dirname(path))).st_uid)
    except OSError:
        pass
    return uids


def _impostor(path: str, trusted: set[int], conn: socket.socket | None = None) -> str | None:
    """Why the socket at ``path`` (or the peer on ``conn``) is not served by one of the
    ``trusted`` users; None when it is. A socket someone else made could take the raw run
    and forge answers."""
    import stat

    if conn is None:
        found = os.lstat(path)
        if not stat.S_ISSOCK(found.st_mode):
            return "not a socket"
        if found.st_uid not in trusted:
            return f"owned by uid {found.st_uid}"
        return None
    peer_option = getattr(socket, "SO_PEERCRED", None)
    if peer_option is None:  # no peer credentials here (macOS): the owner's check stands
        return None
    import struct

    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, peer_option, 12))
    return None if uid in trusted else f"served by uid {uid}"


def _refuse(path: str, why: str) -> None:
    sys.stderr.write(
        f"memhoncho: {path} is not this deployment's relay ({why}); capturing in this process\n"
    )


def request(path: str, config: str, header: dict[str, Any], body: bytes = b"") -> Answer | None:
    """Send one request to the relay at ``path``; its answer, or None when there is none (or
    the socket is not the deployment's: ``_impostor``)."""
    try:
        trusted = relay_uids(path)
        why = _impostor(path, trusted)
        if why is not None:
            _refuse(path, why)
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(path)
            why = _impostor(path, trusted, conn)
            if why is not None:
                _refuse(path, why)
                return None
            conn.settimeout(ANSWER_TIMEOUT_S)
            line = json.dumps({**header, "config_dir": os.path.abspath(config)}).encode()
            conn.sendall(line + b"\n" + body)
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        reply = json.loads(b"".join(chunks))
        answer = (int(reply["exit"]), str(reply["stdout"]), str(reply["stderr"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no relay, or it went away before answering: run in-process
    if answer[0] == DECLINED:
        return None
    return answer


def listening(path: str) -> bool:
    """Whether a process accepts connections on the socket at ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(path)
        return True
    except OSError:
        return False
