"""One command-line contract for every ``memhoncho`` command.

Every option has help text and shows its default; and every command keeps the exit codes:
0 success, 2 refused input that will never succeed, 3 a temporary condition, 64 a usage error
(1, a finding, is doctor's, audit's and healthcheck's). Each command is run as a user runs it,
in a fresh interpreter; where a command has no such case, the table says why.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from memhoncho.capture import relay_socket
from memhoncho.cli import parser as cli_parser
from memhoncho.deployment import initialise
from memhoncho.testing.config import write_settings
from memhoncho.testing.ports import free_port
from memhoncho.testing.runs import run_event

DOWN = "postgresql://memhoncho@127.0.0.1:1/nothing"  # nothing listens on port 1
BAD = {"MEMHONCHO_PARTITIONS": "0"}  # refused settings: ERR_CONFIG
STORE_DOWN = {"MEMHONCHO_STORE_URL": DOWN}


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command that runs, by its words (``db upgrade``)."""
    found = {}

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[" ".join(words)] = parser
        for action in subs:
            for name, child in action.choices.items():
                walk(child, [*words, name])

    walk(cli_parser.build(), [])
    return found


COMMANDS = _commands()


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_every_option_of_every_command_has_help_and_shows_its_default(words: str) -> None:
    parser = COMMANDS[words]
    shown = parser.format_help()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"{words}: {name} has no help"
        if action.default not in (None, False, argparse.SUPPRESS):
            rendered = parser._get_formatter()._expand_help(action)  # noqa: SLF001
            assert "default" in rendered, f"{words}: {name} does not show its default"
    assert "exit codes" in shown and "64 a usage error" in shown


def test_the_top_level_help_describes_the_tool_and_the_version_is_printed() -> None:
    top = _memhoncho(Path.cwd(), ["--help"], {})
    assert top.returncode == 0
    assert "durable, ordered, exactly-once" in top.stdout
    assert "Add a subcommand" not in top.stdout and "register(" not in top.stdout
    version = _memhoncho(Path.cwd(), ["--version"], {})
    assert version.returncode == 0 and version.stdout.startswith("memhoncho ")


# ---- the exit-code contract --------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    argv: list[str]
    env: dict[str, str] | None = None
    setup: Callable[[Path], None] | None = None


Step = Run | str  # a str: why the command has no such case


def _bad_run(root: Path) -> None:
    (root / "run.json").write_text(json.dumps({"conversation_id": "c1"}))


def _one_captured(root: Path) -> None:
    from memhoncho.capture.host import Host

    with Host(root / "config", root / "data", init=True) as host:
        host.capture(run_event("conv-1", 0))


def _an_export(root: Path) -> None:
    lines = [{"id": "c1", "messages": [{"role": "user", "content": "hi"}]}]
    (root / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _fresh_relay_heartbeat(root: Path) -> None:
    beat = root / "data" / "state" / "heartbeats" / f"relay-{socket.gethostname()}"
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.touch()


def _a_file_for_a_data_dir(root: Path) -> None:
    (root / "file").write_text("not a folder")


def _mcp_tokens(root: Path) -> None:
    (root / "tokens").write_text("a-token-long-enough-to-serve ana@example.com\n")
    (root / "tokens").chmod(0o600)


def _broken_claude_settings(root: Path) -> None:
    (root / "proj" / ".claude").mkdir(parents=True)
    (root / "proj" / ".claude" / "settings.json").write_text('{"model": "opus",')


PROJECT = ["--project", "{root}/proj"]
CLAUDE_TEMPORARY = "it only edits or reads local JSON files: a failure is their content (2)"


MCP_HTTP = ["mcp", "--http", "127.0.0.1:{port}", "--tokens-file", "{root}/tokens"]

NOT_INITIALISED = ["--data-dir", "{root}/dta"]
SERVES = "serves"  # success: a server that starts serving (then stopped by the test)

CONTRACT: dict[str, dict[str, Step]] = {
    "init": {
        "ok": Run(["--data-dir", "{root}/new", "init"]),
        "refused": Run(["--data-dir", "{root}/file", "init"], setup=_a_file_for_a_data_dir),
        "temporary": "init writes one small file; what stops it is a refusal (a file in the way)",
    },
    "config show": {
        "ok": Run(["config", "show", "--json"]),
        "refused": Run(["config", "show"], env=BAD),
        "temporary": "config show reads files only: nothing in it is temporary",
    },
    "capture": {
        "ok": Run(["capture", "--file", "{root}/run.json"]),
        "refused": Run(["capture", "--file", "{root}/run.json"], setup=_bad_run),
        "temporary": Run(["capture", "--file", "{root}/run.json"], env=STORE_DOWN),
    },
    "import": {
        "ok": Run(["import", "{root}/history.jsonl", "--json"], setup=_an_export),
        "refused": Run(["import", "{root}/missing.jsonl"]),
        "temporary": Run(["import", "{root}/history.jsonl"], env=STORE_DOWN, setup=_an_export),
    },
    "sweep": {
        "ok": Run(["sweep", "--json"]),
        "refused": Run([*NOT_INITIALISED, "sweep"]),
        "temporary": Run(["sweep"], env=STORE_DOWN),
    },
    "replay": {
        "ok": Run(["replay", "--json"]),
        "refused": Run([*NOT_INITIALISED, "replay"]),
        "temporary": Run(["replay"], env=STORE_DOWN),
    },
    "audit": {
        "ok": Run(["audit", "--json"]),
        "refused": Run([*NOT_INITIALISED, "audit"]),
        "temporary": Run(["audit"], env=STORE_DOWN, setup=_one_captured),
    },
    "status": {
        "ok": Run(["status", "--json"]),
        "refused": Run([*NOT_INITIALISED, "status"]),
        "temporary": "status reports an outage in its view (exit 0); it never fails on one",
    },
    "doctor": {
        "ok": "needs live workers, beat and Honcho: tests/status/test_operations.py (slow)",
        "refused": "doctor diagnoses what it is given: broken settings or a mistyped folder"
        " are failed checks (exit 1): tests/status/test_doctor_settings.py",
        "temporary": "an outage is a failed check: exit 1, a finding",
    },
    "healthcheck": {
        "ok": Run(["healthcheck", "relay"], setup=_fresh_relay_heartbeat),
        "refused": Run(["healthcheck", "beat"], env=BAD),
        "temporary": "unhealthy is exit 1 (a finding), the answer a healthcheck gives",
    },
    "serve-status": {
        "ok": Run(["serve-status", "--port", "{port}"], env={"MEMHONCHO_STATUS_TOKEN": "t"}),
        "refused": Run(["serve-status"], env=BAD),
        "temporary": Run(
            ["serve-status", "--port", "{taken}"], env={"MEMHONCHO_STATUS_TOKEN": "t"}
        ),
    },
    "stand-in": {
        "ok": Run(["stand-in", "--port", "{port}"]),
        "refused": "its only inputs are a port and an address: a bad one is a usage error (64)",
        "temporary": Run(["stand-in", "--port", "{taken}"]),
    },
    "mcp": {
        "ok": Run(MCP_HTTP, setup=_mcp_tokens),
        "refused": Run(["mcp", "--http", "127.0.0.1:{port}"]),  # no token to check requests by
        "temporary": Run(
            ["mcp", "--http", "127.0.0.1:{taken}", "--tokens-file", "{root}/tokens"],
            setup=_mcp_tokens,
        ),
    },
    "claude-code install": {
        "ok": Run(["claude-code", "install", *PROJECT, "--owner", "ana"]),
        "refused": Run(["claude-code", "install", *PROJECT], setup=_broken_claude_settings),
        "temporary": CLAUDE_TEMPORARY,
    },
    "claude-code uninstall": {
        "ok": Run(["claude-code", "uninstall", *PROJECT]),
        "refused": Run(["claude-code", "uninstall", *PROJECT], setup=_broken_claude_settings),
        "temporary": CLAUDE_TEMPORARY,
    },
    "claude-code status": {
        "ok": Run(["claude-code", "status", *PROJECT]),
        "refused": Run(["claude-code", "status", *PROJECT], setup=_broken_claude_settings),
        "temporary": CLAUDE_TEMPORARY,
    },
    "claude-code hook": {
        "ok": Run(["claude-code", "hook", "--owner", "ana"]),
        "refused": "a hook always exits 0 (Claude Code reads 2 as an order): errors go to status",
        "temporary": "a hook always exits 0; what it could not capture waits for the next hook",
    },
    "relay": {
        "ok": Run(["relay"]),
        "refused": Run(["relay"], env=BAD),
        "temporary": "an outage while relaying is logged and retried; the relay keeps running",
    },
    "run": {
        "ok": "starts a worker and beat: tests/edge/test_embedded_broker.py (slow)",
        "refused": Run(["run"], env=BAD),
        "temporary": "the worker retries an unreachable broker itself (Celery)",
    },
    "demo": {
        "ok": "the whole loop, twice in one folder: tests/edge/test_demo.py (slow)",
        "refused": Run(["demo", "--data-dir", "{root}/file"], setup=_a_file_for_a_data_dir),
        "temporary": "the demo runs its own stand-in, worker and beat: a failed step exits 1",
    },
    "bench": {
        "ok": "each bench runs for minutes: `memhoncho bench ...` in docs/performance",
        "refused": "a bench's only inputs are its name and counts: a bad one is a usage error",
        "temporary": "a bench needs no service that can be down (its own stand-in and dirs)",
    },
    "db upgrade": {
        "ok": Run(["db", "upgrade", "--url", "{postgres}"]),
        "refused": Run(["db", "upgrade"]),  # no store_url and no --url
        "temporary": Run(["db", "upgrade", "--url", DOWN]),
    },
    "store migrate": {
        "ok": Run(["store", "migrate", "--to", "{postgres}", "--json"], setup=_one_captured),
        "refused": Run(["store", "migrate", "--to", "mysql://db/x"]),
        "temporary": Run(["store", "migrate", "--to", DOWN], setup=_one_captured),
    },
}
EXPECTED = {"ok": 0, "refused": 2, "temporary": 3}


def test_the_contract_table_names_every_command() -> None:
    assert sorted(CONTRACT) == sorted(COMMANDS)


def _env(root: Path, extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMHONCHO_", "HONCHO_"))}
    env.update(
        HOME=str(root / "home"),
        MEMHONCHO_CONFIG_DIR=str(root / "config"),
        MEMHONCHO_DATA_DIR=str(root / "data"),
        **(extra or {}),
    )
    return env


def _memhoncho(
    root: Path, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", *argv],
        env=env or None,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _serving(root: Path, argv: list[str], env: dict[str, str], port: int | None) -> int:
    """Start a server, wait until it serves, stop it with SIGTERM: 0 when it served."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memhoncho", *argv],
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    socket_path = str(root / "data" / "state" / "relay.sock")
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode
            if port is None and relay_socket.listening(socket_path):
                return 0
            if port is not None:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        return 0
            time.sleep(0.1)
        return -1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


CASES = [
    (command, kind)
    for command in sorted(CONTRACT)
    for kind in ("ok", "refused", "temporary", "usage")
]


@pytest.mark.parametrize(("command", "kind"), CASES)
def test_every_command_keeps_the_exit_code_contract(
    tmp_path: Path, command: str, kind: str, request: pytest.FixtureRequest
) -> None:
    root = tmp_path
    (root / "home").mkdir()
    (root / "config").mkdir()
    initialise(root / "data")
    (root / "run.json").write_text(json.dumps(run_event("conv-1", 0)))
    if kind == "usage":
        done = _memhoncho(root, [*command.split(), "--no-such-option"], _env(root, None))
        assert done.returncode == 64, done.stderr
        assert "ERR_USAGE" in done.stderr
        return
    step = CONTRACT[command][kind]
    if isinstance(step, str):
        assert len(step) > 20  # a reason, not a placeholder
        pytest.skip(f"{command}: no {kind} case: {step}")
    if step.setup is not None:
        step.setup(root)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = free_port()
        values = {"root": str(root), "port": str(port), "taken": str(taken.getsockname()[1])}
        if any("{postgres}" in a for a in step.argv):
            values["postgres"] = request.getfixturevalue("postgres_url")
        argv = [a.format(**values) for a in step.argv]
        env = _env(root, step.env)
        if kind == "ok" and command in ("relay", "serve-status", "stand-in", "mcp"):
            served = _serving(root, argv, env, None if command == "relay" else port)
            assert served == 0, f"{command} did not serve"
            return
        done = _memhoncho(root, argv, env)
    said = done.stdout + done.stderr
    assert done.returncode == EXPECTED[kind], said
    assert "Traceback" not in said
    if kind != "ok":
        assert "ERR_" in done.stderr, said


def test_status_doctor_and_the_relay_agree_on_when_a_relay_heartbeat_is_stale() -> None:
    from memhoncho.capture.relay import HEARTBEAT_STALE_S
    from memhoncho.store import relay_watch

    assert relay_watch.HEARTBEAT_STALE_S == HEARTBEAT_STALE_S  # status and doctor read this


def test_every_json_output_is_one_object(tmp_path: Path) -> None:
    write_settings(tmp_path / "config")
    initialise(tmp_path / "data")
    (tmp_path / "home").mkdir()
    env = _env(tmp_path, None)
    for argv in (["doctor", "--json"], ["status", "--json"], ["config", "show", "--json"]):
        done = _memhoncho(tmp_path, argv, env)
        assert isinstance(json.loads(done.stdout), dict), argv


def test_the_configuration_page_lists_every_setting_and_the_commands_page_every_command() -> None:
    from memhoncho.settings import FIELDS

    docs = Path(__file__).resolve().parents[2] / "docs"
    settings_page = (docs / "configuration.md").read_text()
    for name in FIELDS:
        assert f"| `{name}` |" in settings_page, name
    commands_page = (docs / "commands.md").read_text()
    for words in COMMANDS:
        assert f"| `{words}" in commands_page, words
