"""A mistyped data directory swallows nothing: ``Host``, ``memhoncho mcp``, the integrations and
every command refuse a named folder that was never initialised (``ERR_NOT_INITIALISED``) and
create nothing, where they used to answer ``captured`` for turns no worker would read. And a
framework host hears once, not at every run, that its captures will not move."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.capture.host import Host
from memhoncho.errors import NotInitialised
from memhoncho.integrations import bridge
from memhoncho.testing.processes import memhoncho_env


def _mistyped(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir(exist_ok=True)
    return tmp_path / "memhoncho-dta"  # the folder the user meant was ".../memhoncho-data"


@pytest.mark.parametrize("how", ["argument", "variable"])
@pytest.mark.parametrize("framework", ["pydantic_ai", "openai_agents", "langgraph"])
def test_an_integration_on_a_mistyped_folder_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framework: str, how: str
) -> None:
    """As the integrations' docs build one: ``HonchoMemory(Host(...), owner=...)``."""
    module = pytest.importorskip(f"memhoncho.integrations.{framework}")
    typo = _mistyped(tmp_path)
    if how == "variable":
        monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(typo))
    with pytest.raises(NotInitialised) as refused:
        module.HonchoMemory(
            Host(tmp_path / "config", typo if how == "argument" else None), owner="ana"
        )
    assert refused.value.code == "ERR_NOT_INITIALISED"
    assert str(typo) in refused.value.message
    assert not typo.exists()


def _memhoncho(
    tmp_path: Path, typo: Path, argv: list[str], stdin: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = memhoncho_env(
        config_dir=tmp_path / "config",
        data_dir=typo,
        api_key="a-key",
        extra={"HOME": str(tmp_path / "home"), "MEMHONCHO_STATUS_TOKEN": "t"},
    )
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", *argv],
        env=env,
        cwd=tmp_path,
        input=json.dumps(stdin or {"conversation_id": "c", "run_id": "r", "inputs": []}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_memhoncho_mcp_on_a_mistyped_variable_refuses_on_stderr_and_creates_nothing(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp")
    typo = _mistyped(tmp_path)
    done = _memhoncho(tmp_path, typo, ["mcp", "--owner", "ana"])  # stdio, as clients start it
    assert done.returncode == 2, done.stderr
    assert "ERR_NOT_INITIALISED" in done.stderr and str(typo) in done.stderr
    assert done.stdout == ""  # the protocol's stream: nothing a client could read as a reply
    assert not typo.exists()


#: every command that reads or writes a deployment's data directory
REFUSING = [
    ["capture"],
    ["capture", "--hint"],
    ["relay"],
    ["sweep"],
    ["replay"],
    ["audit"],
    ["status", "--json"],
    ["serve-status", "--port", "1"],
    ["store", "migrate", "--to", "postgresql://memhoncho@127.0.0.1:1/nothing"],
    ["mcp", "--http", "127.0.0.1:1", "--token-file", "t", "--owner", "ana"],
    ["import", "export.jsonl"],
]


@pytest.mark.parametrize("argv", REFUSING, ids=" ".join)
def test_every_command_on_a_mistyped_folder_exits_2_and_creates_nothing(
    tmp_path: Path, argv: list[str]
) -> None:
    if argv[0] == "mcp":
        pytest.importorskip("mcp")
        (tmp_path / "t").write_text("a-token-long-enough-to-serve\n")  # past its own checks
        (tmp_path / "t").chmod(0o600)
    if argv[0] == "import":  # a readable export: the folder is what is refused
        turn = {"conversation_id": "c", "run_id": "r", "inputs": ["hi"], "output": "hello"}
        (tmp_path / "export.jsonl").write_text(json.dumps(turn) + "\n")
    typo = _mistyped(tmp_path)
    done = _memhoncho(tmp_path, typo, argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ERR_NOT_INITIALISED" in done.stderr and "Traceback" not in done.stderr
    assert not typo.exists()


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_the_claude_code_hook_on_a_mistyped_folder_exits_0_logs_the_refusal_and_creates_nothing(
    tmp_path: Path, how: str
) -> None:
    """Claude Code reads a hook's exit 2 as an instruction to the model, so the hook exits 0;
    the refusal goes to memhoncho's log (stderr), and nothing is written in the folder, not
    even the hook's error record (``state/claude-code/errors.json``)."""
    typo = _mistyped(tmp_path)
    other = tmp_path / "memhoncho-dat"  # the variable's own typo, when the argument names one
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("")
    call = {
        "session_id": "s1",
        "transcript_path": str(transcript),
        "hook_event_name": "Stop",
        "cwd": str(tmp_path),
    }
    argv = ["claude-code", "hook"] + (["--data-dir", str(typo)] if how == "argument" else [])
    done = _memhoncho(tmp_path, other if how == "argument" else typo, argv, stdin=call)
    assert done.returncode == 0, done.stderr
    assert "ERR_NOT_INITIALISED" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not typo.exists() and not other.exists()


def test_a_hook_error_is_kept_in_an_initialised_folder_only(tmp_path: Path) -> None:
    from memhoncho import deployment
    from memhoncho.integrations.claude_code import cursor, handler

    call = json.dumps({"hook_event_name": "Stop"}).encode()
    refused = NotInitialised("not initialised")
    handler.record_failure(str(tmp_path / "typo"), call, refused)
    assert not (tmp_path / "typo").exists()
    deployment.initialise(tmp_path / "data")
    handler.record_failure(str(tmp_path / "data"), call, refused)
    kept = cursor.last_errors(tmp_path / "data")
    assert [(e["event"], e["code"]) for e in kept] == [("Stop", "ERR_NOT_INITIALISED")]


def test_doctor_on_a_mistyped_folder_fails_its_data_dir_check_and_creates_nothing(
    tmp_path: Path,
) -> None:
    typo = _mistyped(tmp_path)
    done = _memhoncho(tmp_path, typo, ["doctor", "--json"])
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["data_dir"]["verdict"] == "fail"
    assert "not an initialised" in checks["data_dir"]["detail"]
    assert not typo.exists()


def test_a_framework_host_is_told_once_that_its_captures_wait_for_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("MEMHONCHO_API_KEY", raising=False)  # a deployment with no key yet
    host = Host(tmp_path / "config", tmp_path / "data", init=True)

    def turn(n: int) -> bridge.Turn:
        said = (bridge.Entry(2 * n, f"question {n}"),)
        return bridge.Turn("test", "c1", "ana", str(n), said, bridge.Entry(2 * n + 1, "answer"))

    with host, caplog.at_level(logging.WARNING, logger="memhoncho.integrations.bridge"):
        results = [bridge.capture(host, turn(n)) for n in range(3)]
    assert [r.hint for r in results] == ["no-key"] * 3  # each durable; none will move yet
    told = [r for r in caplog.records if getattr(r, "action", "") == "capture_stalled"]
    assert len(told) == 1 and "API key" in told[0].getMessage()
    assert getattr(told[0], "hint", None) == "no-key"
