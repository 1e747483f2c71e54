"""``memhoncho capture`` through the relay's socket: the same answers as in-process, and the
in-process capture whenever the relay cannot answer, with the record written exactly once.

Real processes: a ``memhoncho relay`` and the command, as an agent's hook runs it. The folders
are short paths under /tmp: a UNIX socket's path must fit in 107 bytes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memhoncho import dirs, ids
from memhoncho.capture.relay_server import FAULT_ENV, KILL_BEFORE_ANSWER, KILL_BEFORE_CAPTURE
from memhoncho.deployment import initialise
from memhoncho.store.layout import Layout
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_settings
from memhoncho.testing.relay import RelayProcess
from memhoncho.testing.runs import run_event


def capture(config: Path, data: Path, stdin: bytes) -> tuple[int, bytes, bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config)]
        + ["--data-dir", str(data), "capture"],
        input=stdin,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def batch_ids(data: Path, conversation_id: str) -> list[str]:
    records = Outbox(Layout(data)).read(ids.conversation_key(conversation_id)).records
    return [r["batch_id"] for r in records]


def test_a_run_captured_through_the_relay_is_durable_and_the_socket_goes_with_the_relay(
    short_root: Path,
) -> None:
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data) as relay:
        code, out, err = capture(config, data, json.dumps(run_event("conv-1", 0)).encode())
        assert (code, err) == (0, b"")
        result = json.loads(out)
        assert result["status"] == "captured" and result["enqueued"] is False
        assert batch_ids(data, "conv-1") == [result["batch_id"]]
        assert relay.socket_path.exists() and oct(relay.socket_path.stat().st_mode)[-3:] == "600"
    assert relay.proc is not None and relay.proc.returncode == 0
    assert not relay.socket_path.exists()


def _steps() -> list[bytes]:
    """Runs that exercise each answer: captured, duplicate, refusals of both exit codes."""
    too_large = run_event("conv-1", 5)
    too_large["inputs"][0]["text"] = "x" * 2000
    malformed = run_event("conv-1", 6)
    del malformed["outcome"]
    deselected = run_event("conv-2", 0)
    deselected["selection"] = ["another-memory"]
    return [
        json.dumps(run_event("conv-1", 0)).encode(),
        json.dumps(run_event("conv-1", 0)).encode(),  # duplicate
        json.dumps(run_event("conv-1", 1)).encode(),  # the outbox is full: exit 3
        json.dumps(too_large).encode(),
        json.dumps(malformed).encode(),
        json.dumps(run_event(" padded ", 0)).encode(),
        b'{"conversation_id": "conv-1", "secret-text',
        json.dumps(deselected).encode(),
        b"",
    ]


def _comparable(answer: tuple[int, bytes, bytes]) -> tuple[int, bytes, object]:
    """The answer, less the size in a too-large refusal: the record's ``captured_at`` is a
    float whose digits (and so the size, by a byte) differ from one capture to the next."""
    code, out, err = answer
    if b"ERR_CAPTURE_TOO_LARGE" in err:
        error = json.loads(err)
        error.pop("message")
        return code, out, error
    return code, out, err


def test_every_answer_and_exit_code_through_the_relay_is_the_in_process_one(
    short_root: Path,
) -> None:
    config = short_root / "config"
    write_settings(config, max_pending_batches=1, max_batch_bytes=1024)
    through, alone = short_root / "through", short_root / "alone"
    initialise(alone)  # the relay initialises its own
    with RelayProcess(config, through):
        answers = [capture(config, through, step) for step in _steps()]
    expected = [capture(config, alone, step) for step in _steps()]
    assert [_comparable(a) for a in answers] == [_comparable(e) for e in expected]
    assert [code for code, _, _ in answers] == [0, 0, 3, 2, 2, 2, 2, 0, 2]
    assert batch_ids(through, "conv-1") == batch_ids(alone, "conv-1")


def test_with_no_relay_but_a_stale_socket_file_the_command_captures_in_process(
    short_root: Path,
) -> None:
    config, data = short_root / "config", short_root / "data"
    path = dirs.relay_socket(data)
    Path(path).parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # a socket file whose process is gone: nobody listens
    stale.close()
    code, out, err = capture(config, data, json.dumps(run_event("conv-1", 0)).encode())
    assert (code, err) == (0, b"")
    assert batch_ids(data, "conv-1") == [json.loads(out)["batch_id"]]


def test_a_relay_of_another_configuration_is_not_used(short_root: Path) -> None:
    config, other, data = short_root / "config", short_root / "other", short_root / "data"
    write_settings(config, max_pending_batches=1)  # the command's settings must apply
    with RelayProcess(other, data):
        assert capture(config, data, json.dumps(run_event("conv-1", 0)).encode())[0] == 0
        code, _, err = capture(config, data, json.dumps(run_event("conv-1", 1)).encode())
    assert code == 3 and json.loads(err)["code"] == "ERR_OUTBOX_CAPACITY"


@pytest.mark.parametrize(
    ("fault", "status"),
    [(KILL_BEFORE_CAPTURE, "captured"), (KILL_BEFORE_ANSWER, "duplicate")],
)
def test_a_relay_killed_holding_the_run_leaves_its_record_once_and_the_command_exits_0(
    short_root: Path, fault: str, status: str
) -> None:
    config, data = short_root / "config", short_root / "data"
    run = json.dumps(run_event("conv-1", 0)).encode()
    relay = RelayProcess(config, data, {FAULT_ENV: fault}).start()
    try:
        code, out, err = capture(config, data, run)
        assert relay.proc is not None and relay.proc.wait(10) == -9  # it died holding it
    finally:
        relay.stop()
    # Killed before its capture, the command's own writes the record; killed after, the
    # command's own finds it: a duplicate, which is a success (exit 0).
    assert (code, err) == (0, b"")
    answer: dict[str, Any] = json.loads(out)
    assert answer["status"] == status
    assert batch_ids(data, "conv-1") == [answer["batch_id"]]
    assert capture(config, data, run)[0] == 0  # the socket left behind is a failed connect
    assert batch_ids(data, "conv-1") == [answer["batch_id"]]
