"""``memhoncho capture``: one run as JSON in, the CaptureResult as JSON out, typed refusals.

Run as a real process, the way an agent's per-turn hook runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.cli.exits import EXIT_NOT_NOW, EXIT_REFUSED
from memhoncho.store import hint_marks
from memhoncho.store.layout import Layout
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.runs import run_event


def capture(
    config_dir: Path, data_dir: Path, stdin: bytes, *extra: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config_dir)]
        + ["--data-dir", str(data_dir), "capture", *extra],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def as_json(run: dict[str, Any]) -> bytes:
    return json.dumps(run).encode()


def test_a_run_on_stdin_is_durable_and_its_result_printed_as_json(
    config_dir: Path, data_dir: Path
) -> None:
    done = capture(config_dir, data_dir, as_json(run_event("conv-1", 0)))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "captured" and result["enqueued"] is False
    records = Outbox(Layout(data_dir)).read(ids.conversation_key("conv-1")).records
    assert [r["batch_id"] for r in records] == [result["batch_id"]]
    assert done.stderr == b""


def test_the_same_run_again_from_a_file_is_a_duplicate(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run.json"
    run.write_bytes(as_json(run_event("conv-1", 0)))
    first = capture(config_dir, data_dir, b"", "--file", str(run))
    again = capture(config_dir, data_dir, b"", "--file", str(run))
    assert json.loads(first.stdout)["status"] == "captured"
    assert json.loads(again.stdout)["status"] == "duplicate"
    assert json.loads(again.stdout)["batch_id"] == json.loads(first.stdout)["batch_id"]


def _refusal(done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert done.stdout == b""
    error: dict[str, Any] = json.loads(done.stderr)
    return error


def test_text_that_is_not_json_is_refused_with_exit_2_and_no_content_echoed(
    config_dir: Path, data_dir: Path
) -> None:
    done = capture(config_dir, data_dir, b'{"conversation_id": "conv-1", "secret-text')
    assert done.returncode == EXIT_REFUSED == 2
    error = _refusal(done)
    assert error["code"] == "ERR_INVALID_EVENT"
    assert b"secret-text" not in done.stderr
    assert not (data_dir / "data" / "outbox").exists()


def test_a_malformed_run_is_refused_with_the_host_apis_code_and_fields(
    config_dir: Path, data_dir: Path
) -> None:
    run = run_event("conv-1", 0)
    del run["outcome"]
    done = capture(config_dir, data_dir, as_json(run))
    assert done.returncode == EXIT_REFUSED
    error = _refusal(done)
    assert error["code"] == "ERR_INVALID_EVENT" and error["fields"] == ["outcome"]


def test_an_id_that_cannot_be_a_file_name_is_refused(config_dir: Path, data_dir: Path) -> None:
    done = capture(config_dir, data_dir, as_json(run_event(" padded ", 0)))
    assert done.returncode == EXIT_REFUSED
    assert _refusal(done)["code"] == "ERR_INVALID_ID"


def test_a_run_over_the_size_ceiling_is_refused(config_dir: Path, data_dir: Path) -> None:
    write_settings(config_dir, max_batch_bytes=1024)
    run = run_event("conv-1", 0)
    run["inputs"][0]["text"] = "x" * 2000
    done = capture(config_dir, data_dir, as_json(run))
    assert done.returncode == EXIT_REFUSED
    assert _refusal(done)["code"] == "ERR_CAPTURE_TOO_LARGE"


def test_a_full_outbox_exits_3_so_the_hook_can_retry_later(
    config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_pending_batches=1)
    assert capture(config_dir, data_dir, as_json(run_event("conv-1", 0))).returncode == 0
    done = capture(config_dir, data_dir, as_json(run_event("conv-1", 1)))
    assert done.returncode == EXIT_NOT_NOW == 3
    error = _refusal(done)
    assert error["code"] == "ERR_OUTBOX_CAPACITY" and error["limit"] == 1


def test_a_run_that_deselects_memhoncho_writes_nothing_and_exits_0(
    config_dir: Path, data_dir: Path
) -> None:
    run = run_event("conv-1", 0)
    run["selection"] = ["another-memory"]
    done = capture(config_dir, data_dir, as_json(run))
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "status": "not-selected",
        "batch_id": None,
        "enqueued": False,
        "hint": "none",
        "redactions": 0,
    }
    assert not (data_dir / "data" / "outbox" / "conv-1.jsonl").exists()


def test_a_capture_with_no_hint_waiting_leaves_the_relay_one_request_naming_its_conversation(
    config_dir: Path, data_dir: Path
) -> None:
    write_api_key(config_dir, "sk-capture-command")
    for i in range(3):
        assert capture(config_dir, data_dir, as_json(run_event("conv/1", i))).returncode == 0
    layout = Layout(data_dir)
    key = ids.conversation_key("conv/1")
    assert hint_marks.relay_requests(layout) == [key]
    assert hint_marks.take_request(layout, key) == "conv/1"
    assert hint_marks.relay_requests(layout) == []
