"""Hostile exports cost a part, never the machine: each file the attacker's probe used is
refused (or its bad part skipped and the rest imported) by ``memhoncho import`` in bounded
memory, measured as the whole process's peak RSS; a deeply nested run given to ``memhoncho
capture`` is a typed refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from memhoncho.deployment import initialise
from memhoncho.imports import bounded
from memhoncho.testing.exports import chatgpt_conversation, jsonl_conversation

pytestmark = pytest.mark.slow

MEMORY_BOUND_KB = 200 * 1024  # the bound: 200 MB for the whole import process
HANG_GUARD_S = 120  # not a measure: only so a regression fails instead of hanging the suite

PEAK = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(done.returncode)
"""


def _import(tmp_path: Path, export: Path, *options: str) -> tuple[int, dict, int]:
    """``memhoncho import --dry-run --json`` in a process of its own: (exit, summary, peak KB)."""
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir(exist_ok=True)
    initialise(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    done = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "memhoncho"]
        + ["--config-dir", str(config), "--data-dir", str(data)]
        + ["import", str(export), "--dry-run", "--json", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD_S,
        check=False,
    )
    *errors, peak = done.stderr.strip().splitlines()
    summary = json.loads(done.stdout) if done.stdout.strip() else {"stderr": "\n".join(errors)}
    return done.returncode, summary, int(peak)


def _good_chatgpt() -> bytes:
    return json.dumps(chatgpt_conversation(1, 2)).encode()


@pytest.mark.parametrize("depth", [40_000, 100_000, 50_000_000])
def test_a_deeply_nested_conversation_is_skipped_and_the_next_one_imported(
    tmp_path: Path, depth: int
) -> None:
    export = tmp_path / "conversations.json"
    export.write_bytes(b"[" + b"[" * depth + b"]" * depth + b"," + _good_chatgpt() + b"]")
    code, summary, peak = _import(tmp_path, export, "--format", "chatgpt")
    assert code == 1, summary  # a finding: one part broken, said in the summary
    assert summary["broken"] == [{"where": "conversation 0", "reason": bounded.too_deep().reason}]
    assert summary["totals"]["would-capture"] == 2
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_a_zip_holding_one_string_of_128_mb_is_refused_as_a_bomb_before_it_is_read(
    tmp_path: Path,
) -> None:
    export = tmp_path / "export.zip"
    with (
        zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("conversations.json", "w") as member,
    ):
        member.write(b'[{"mapping": {}, "id": "x", "title": "')
        for _ in range(128):
            member.write(b"a" * (1024 * 1024))
        member.write(b'"}]')
    assert export.stat().st_size < 1024 * 1024
    code, summary, peak = _import(tmp_path, export)
    assert code == 2 and "zip bomb" in summary["stderr"]
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_a_conversation_past_the_bound_in_a_real_sized_zip_is_skipped_and_the_rest_imported(
    tmp_path: Path,
) -> None:
    """Not a bomb (it compresses as text does): the part over 32 MB is skipped, in bounded
    memory, and the conversations around it are read."""
    export = tmp_path / "export.zip"
    noise = os.urandom(24 * 1024 * 1024).hex().encode()  # 48 MB that compresses about 2 times
    with (
        zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("conversations.json", "w") as member,
    ):
        member.write(b"[" + _good_chatgpt() + b',{"id": "big", "mapping": {}, "t": "')
        member.write(noise)
        member.write(b'"},' + json.dumps(chatgpt_conversation(2, 1)).encode() + b"]")
    code, summary, peak = _import(tmp_path, export)
    assert code == 1, summary
    assert summary["broken"] == [{"where": "conversation 1", "reason": bounded.too_large().reason}]
    assert summary["totals"]["would-capture"] == 3
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_a_jsonl_line_of_4_gib_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    export = tmp_path / "history.jsonl"
    with open(export, "wb") as handle:  # sparse: the 4 GiB of the string cost no disk
        handle.write(b'{"id": "huge", "messages": [{"role": "user", "content": "')
        handle.seek(4 * 1024**3)
        handle.write(b'"}]}\n' + json.dumps(jsonl_conversation(1, 2)).encode() + b"\n")
    code, summary, peak = _import(tmp_path, export)
    assert code == 1, summary
    assert summary["broken"] == [{"where": "line 1", "reason": bounded.too_large().reason}]
    assert summary["totals"]["would-capture"] == 2
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_a_deeply_nested_jsonl_line_is_a_broken_line_and_the_import_goes_on(
    tmp_path: Path,
) -> None:
    export = tmp_path / "history.jsonl"
    deep = b'{"a":' * 200_000 + b"1" + b"}" * 200_000
    export.write_bytes(deep + b"\n" + json.dumps(jsonl_conversation(1, 1)).encode() + b"\n")
    code, summary, peak = _import(tmp_path, export)
    assert code == 1, summary
    assert summary["broken"] == [
        {"where": "line 1", "reason": f"nested deeper than {bounded.MAX_DEPTH}"}
    ]
    assert summary["totals"]["would-capture"] == 1
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_a_million_empty_lines_are_counted_broken_and_the_first_hundred_named(
    tmp_path: Path,
) -> None:
    export = tmp_path / "history.jsonl"
    export.write_bytes(b"{}\n" * 1_000_000)
    code, summary, peak = _import(tmp_path, export)
    assert code == 1
    assert summary["totals"]["broken"] == 1_000_000
    assert len(summary["broken"]) == 100
    assert peak < MEMORY_BOUND_KB, f"{peak} KB"


def test_capture_of_a_deeply_nested_run_is_a_typed_refusal(tmp_path: Path) -> None:
    initialise(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(tmp_path / "config")]
        + ["--data-dir", str(tmp_path / "data"), "capture"],
        input=b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        capture_output=True,
        timeout=HANG_GUARD_S,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-500:]
    assert json.loads(done.stderr)["code"] == "ERR_INVALID_EVENT"
    assert b"Traceback" not in done.stderr
