"""``memhoncho status`` through the relay's socket: the relay's warm view, drawn for the asking
command's stdout, at most ``--max-age`` old; and the in-process view whenever the relay cannot
answer (none, another configuration, killed before it answered).

Real processes: a ``memhoncho relay`` and the command. The folders are short paths under /tmp:
a UNIX socket's path must fit in 107 bytes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memhoncho import dirs, ids
from memhoncho.capture import relay_socket
from memhoncho.capture.host import Host
from memhoncho.capture.relay_server import FAULT_ENV, KILL_BEFORE_ANSWER
from memhoncho.deployment import Deployment
from memhoncho.status.warm import WarmStatus
from memhoncho.testing.config import write_settings
from memhoncho.testing.relay import RelayProcess
from memhoncho.testing.runs import run_event
from memhoncho.testing.terminal import run_on_terminal


def status(config: Path, data: Path, *options: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config)]
        + ["--data-dir", str(data), "status", *options],
        capture_output=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, **(env or {})},
    )
    assert (done.returncode, done.stderr) == (0, b"")
    return json.loads(done.stdout) if "--json" in options else done.stdout.decode()


def capture_one(config: Path, data: Path, conversation_id: str, i: int) -> None:
    with Host(config, data, hints=False, init=True) as host:
        assert host.capture(run_event(conversation_id, i)).status == "captured"


def test_the_relay_answers_from_its_view_until_it_is_older_than_max_age(
    short_root: Path,
) -> None:
    config, data = short_root / "config", short_root / "data"
    write_settings(config, workspace_id="relayed")
    capture_one(config, data, "conv-1", 0)
    with RelayProcess(config, data):
        first = status(config, data, "--json", "--max-age", "60")
        assert first["config"]["workspace"] == "relayed"
        assert first["outbox"]["pending_batches"] == 1
        capture_one(config, data, "conv-1", 1)
        # Within max-age: the same view, read before the capture (the relay answered it).
        cached = status(config, data, "--json", "--max-age", "60")
        assert cached["generated_at"] == first["generated_at"]
        assert cached["outbox"]["pending_batches"] == 1
        fresh = status(config, data, "--json", "--max-age", "0")
        assert fresh["generated_at"] > first["generated_at"]
        assert fresh["outbox"]["pending_batches"] == 2
    # Without the relay the command reads in-process: always now.
    capture_one(config, data, "conv-2", 0)
    alone = status(config, data, "--json", "--max-age", "60")
    assert alone["outbox"]["pending_batches"] == 3


def _without_times(table: str) -> str:
    """The table less when it was read, how long the oldest record had waited then, and
    whether a relay ran (it did for one of the two)."""
    table = re.sub(r"read_at .*? UTC", "read_at", table)
    table = re.sub(r"(│ relay +│) (running|absent) *", r"\1", table)
    return re.sub(r"(oldest_pending_age_s +│) [0-9.]+ *", r"\1", table)


@pytest.mark.parametrize("columns", [None, "90"])
def test_the_relay_draws_the_table_the_command_would_draw_for_its_stdout(
    short_root: Path, columns: str | None
) -> None:
    config, data = short_root / "config", short_root / "data"
    with Host(config, data, init=True) as host:  # no API key: it publishes no hint
        assert host.capture(run_event("conv-1", 0)).status == "captured"
    env = {"COLUMNS": columns} if columns else {}
    # The two reads are seconds apart under load, and a pending conversation with nothing
    # queued or running counts as stranded SETTLE_S after its capture (a long health reason
    # that widens the table): a delivery holding its lock keeps both views alike.
    deployment = Deployment(config, data)
    with deployment.store().conversation_lock(ids.conversation_key("conv-1")):
        alone = status(config, data, env=env)
        with RelayProcess(config, data):
            relayed = status(config, data, "--max-age", "0", env=env)
    width = int(columns or 120)
    assert max(len(line) for line in relayed.splitlines()) <= width
    assert "\x1b[" not in relayed  # not a terminal: no colour codes
    assert _without_times(relayed) == _without_times(alone)
    assert "pending_batches" in relayed


def test_a_relay_of_another_configuration_is_not_used(short_root: Path) -> None:
    config, other, data = short_root / "config", short_root / "other", short_root / "data"
    write_settings(config, workspace_id="mine")
    write_settings(other, workspace_id="theirs")
    with RelayProcess(other, data):
        assert status(config, data, "--json")["config"]["workspace"] == "mine"


def test_a_relay_killed_before_it_answers_leaves_the_command_to_read_in_process(
    short_root: Path,
) -> None:
    config, data = short_root / "config", short_root / "data"
    capture_one(config, data, "conv-1", 0)
    relay = RelayProcess(config, data, {FAULT_ENV: KILL_BEFORE_ANSWER}).start()
    try:
        view = status(config, data, "--json")
        assert relay.proc is not None and relay.proc.wait(10) == -9  # it died holding it
    finally:
        relay.stop()
    assert view["outbox"]["pending_batches"] == 1


def test_the_relay_declines_an_unknown_request(short_root: Path) -> None:
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data):
        path = dirs.relay_socket(data)
        assert relay_socket.request(path, str(config), {"op": "nope"}) is None
        digest = relay_socket.settings_digest(str(config), str(data))
        header = {"op": "status", "json": True, "settings_digest": digest}
        answer = relay_socket.request(path, str(config), header)
    assert answer is not None and answer[0] == 0 and "outbox" in json.loads(answer[1])


def test_the_warm_view_is_reused_within_max_age_and_read_anew_past_it(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path / "config", tmp_path / "data")
    warm = WarmStatus(deployment, refresh_s=3600)  # no refresh during the test
    first = warm.view(max_age_s=60)
    assert warm.view(max_age_s=60) is first
    capture_one(deployment.config_dir, deployment.data_dir, "conv-1", 0)
    assert warm.view(max_age_s=60)["outbox"]["pending_batches"] == 0  # the cached view
    fresh = warm.view(max_age_s=0)
    assert fresh is not first and fresh["outbox"]["pending_batches"] == 1
    style = (80, False, False)
    table = warm.table(60, style)
    assert warm.table(60, style) is table  # drawn once per view and style
    assert warm.table(60, (100, False, False)) is not table


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["status"], ("status", {}, set())),
        (
            ["--config-dir", "c", "status", "--json", "--max-age=0"],
            ("status", {"--config-dir": "c", "--max-age": "0"}, {"--json"}),
        ),
        (
            ["--data-dir=d", "capture", "--file", "f"],
            ("capture", {"--data-dir": "d", "--file": "f"}, set()),
        ),
        (["status", "--help"], None),
        (["status", "--file", "f"], None),  # a capture option: the full parser refuses it
        (["capture", "--json"], None),
        (["capture", "--hint"], None),
        (["--json", "status"], None),  # a command's option before the command
        (["status", "--max-age"], None),  # a value missing
        (["doctor"], None),
        ([], None),
    ],
)
def test_only_a_plain_capture_or_status_takes_the_fast_path(
    argv: list[str], parsed: object
) -> None:
    assert relay_socket._parse(argv) == parsed


def _on_a_terminal(config: Path, data: Path, *options: str) -> str:
    """The command's stdout when it is a terminal (a pseudo-terminal 100 columns wide)."""
    done, terminal = run_on_terminal(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config)]
        + ["--data-dir", str(data), "status", *options],
        stream="stdout",
        columns=100,
        timeout_s=60,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    return terminal


def test_on_a_terminal_the_relay_draws_in_colour_as_the_command_would(short_root: Path) -> None:
    config, data = short_root / "config", short_root / "data"
    capture_one(config, data, "conv-1", 0)
    alone = _on_a_terminal(config, data)
    with RelayProcess(config, data):
        relayed = _on_a_terminal(config, data, "--max-age", "0")
    for table in (alone, relayed):
        assert "\x1b[" in table  # colour codes
        plain = re.sub(r"\x1b\[[0-9;]*m", "", table)
        assert max(len(line) for line in plain.splitlines()) <= 100
        assert "pending_batches" in plain
