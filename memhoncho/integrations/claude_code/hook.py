"""``memhoncho claude-code hook``: the command Claude Code runs for each hook event, with the
hook's JSON on stdin.

It hands the call to the relay over its socket (``capture/relay_socket.py``, op
``claude-code``) before importing anything heavy: the relay reads the transcript, captures the
new turns and prints the sections, warm. When no relay answers, the same ``handler.handle``
runs in this process. Either way the hook exits 0: Claude Code reads exit 2 from some hooks as
an instruction to the model, and memory must never steer or stop a session. Failures go to
memhoncho's log (stderr, which Claude Code shows only in its debug view) and to the status
view's last hook errors; the turns they left wait in the transcript for the next hook.

This module imports only the standard library and ``relay_socket``'s client half.
"""

from __future__ import annotations

import os
import sys

from memhoncho import dirs
from memhoncho.capture import relay_socket

COMMAND = ("claude-code", "hook")
#: options the hook takes: name -> attribute
_OPTIONS = {"--config-dir": "config_dir", "--data-dir": "data_dir", "--owner": "owner"}


def wanted(argv: list[str]) -> bool:
    """Whether ``argv`` is a plain hook call (``claude-code hook`` and its known options
    after it); anything else goes to the full parser (``--help``, a usage error: 64)."""
    return argv[:2] == list(COMMAND) and _options(argv[2:]) is not None


def main(argv: list[str]) -> int:
    """Run one hook call; always 0."""
    try:
        raw = sys.stdin.buffer.read()
    except Exception:  # noqa: BLE001 - no input: nothing to do
        return 0
    options = _options(argv[2:]) or {}
    config = dirs.config_dir(options.get("config_dir"))
    data = dirs.data_dir(options.get("data_dir"))
    owner = options.get("owner") or None
    try:
        header = {
            "op": "claude-code",
            "owner": owner,
            "settings_digest": relay_socket.settings_digest(config, data),
        }
        answer = relay_socket.request(dirs.relay_socket(data), config, header, raw)
        if answer is not None:
            _print(answer[1])
            return 0
    except Exception:  # noqa: BLE001 - the in-process way below still runs
        pass
    _in_process(options, data, raw, owner)
    return 0


def _in_process(options: dict[str, str], data: str, raw: bytes, owner: str | None) -> None:
    try:
        from memhoncho import logs
        from memhoncho.capture.host import Host
        from memhoncho.integrations.claude_code import handler

        logs.setup_cli(os.environ.get("MEMHONCHO_LOG_FORMAT") or logs.TEXT)
    except Exception:  # noqa: BLE001 - a broken install still never breaks the session
        return
    try:
        with Host(
            options.get("config_dir"), options.get("data_dir"), hints=False, init=None
        ) as host:
            _print(handler.handle(host, raw, owner))
    except BaseException as exc:  # noqa: BLE001 - exit 0 whatever happens (even SystemExit)
        handler.record_failure(data, raw, exc)


def _options(argv: list[str]) -> dict[str, str] | None:
    """``--name value`` and ``--name=value`` of the known options; None for anything else."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in _OPTIONS:
            if not eq and i + 1 < len(argv):
                i += 1
                value = argv[i]
            found[_OPTIONS[name]] = value
        else:
            return None
        i += 1
    return found


def _print(text: str) -> None:
    if text:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError:
            pass
