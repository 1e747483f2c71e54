"""``memhoncho bench claude-code``: what a Claude Code hook costs the session, whole processes.

Medians, measured in one run and interleaved sample by sample, of fresh processes run as
Claude Code runs the installed hook (its command through ``sh -c``, the hook's JSON on stdin):
``python -c pass`` (the floor); the ``Stop`` hook after one new turn (a prompt, a tool call and
its result, a two-line answer) with a relay on the data directory, on a 50 KB transcript and on
a 50 MB one (the cursor reads only the new bytes); ``SessionStart`` with the relay; and with no
relay (another data directory): the ``Stop`` hook in its own process beside ``memhoncho
capture`` of one such turn, also in its own process. Goals: with the relay <= 2x the floor,
the 50 MB hook the 50 KB one's cost, without it no slower than ``memhoncho capture``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memhoncho.deployment import initialise
from memhoncho.settings import SECRETS_FILE, SETTINGS_FILE
from memhoncho.testing.claude_code_transcript import (
    Transcript,
    hook_input,
    installed_command,
    new_session,
)
from memhoncho.testing.relay import RelayProcess

DEFAULT_SAMPLES = 20
GOAL_RATIO = 2.0
SMALL_BYTES = 50 * 1024  # the small transcript's size before the samples
LARGE_BYTES = 50 * 1024 * 1024  # the large one's
PAD_BYTES = 100 * 1024  # one padding tool result (a file read)
OWNER = "ana@example.com"


def _grow(t: Transcript, size: int) -> None:
    """Turns with large tool results until the file holds ``size`` bytes."""
    i = 0
    while not os.path.exists(t.path) or os.path.getsize(t.path) < size:
        lines = t.turn(f"question {i}", f"answer {i}", tools=1)
        lines[3]["message"]["content"][0]["content"] = "x" * min(PAD_BYTES, size // 4)
        t.write(*lines)
        i += 1


def _timed(command: str | list[str], stdin: bytes, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        command, shell=isinstance(command, str), input=stdin, capture_output=True, env=env
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"failed ({done.returncode}): {done.stderr[-2000:]!r}")
    return elapsed * 1000


def _install(root: Path, name: str, config: Path, data: Path, env: dict[str, str]) -> Path:
    project = root / name
    subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config), "--data-dir", str(data)]
        + ["claude-code", "install", "--project", str(project), "--owner", OWNER],
        env=env,
        check=True,
        capture_output=True,
    )
    return project / ".claude" / "settings.json"


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-claude-code-") as tmp:
        return _measure(Path(tmp), samples)


def _measure(root: Path, samples: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    env["HOME"] = str(root / "home")
    config = root / "config"
    (config / SETTINGS_FILE).parent.mkdir(parents=True)
    (config / SETTINGS_FILE).write_text(json.dumps({"max_pending_batches": 10**6}))
    (config / SECRETS_FILE).write_text(json.dumps({"api-key": "bench-key"}))
    relayed, alone = root / "data", root / "alone-data"
    initialise(relayed)
    initialise(alone)
    with_relay = _install(root, "project", config, relayed, env)
    without = _install(root, "project-alone", config, alone, env)
    transcripts = root / "claude" / "projects"
    small = new_session(str(transcripts))
    large = new_session(str(transcripts))
    lonely = new_session(str(transcripts))
    _grow(small, SMALL_BYTES)
    _grow(large, LARGE_BYTES)
    _grow(lonely, SMALL_BYTES)
    stop = installed_command(with_relay, "Stop")
    stop_alone = installed_command(without, "Stop")
    start = installed_command(with_relay, "SessionStart")
    capture = [sys.executable, "-m", "memhoncho"]
    script = Path(sys.executable).with_name("memhoncho")
    if script.exists():
        capture = [str(script)]
    capture += ["--config-dir", str(config), "--data-dir", str(alone), "capture"]
    floor = [sys.executable, "-c", "pass"]
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "python_pass",
            "stop_hook_50kb",
            "stop_hook_50mb",
            "session_start_hook",
            "stop_hook_in_process",
            "capture_in_process",
        )
    }
    with RelayProcess(config, relayed, extra_env={"HOME": env["HOME"]}):
        for t, command in ((small, stop), (large, stop), (lonely, stop_alone)):
            _timed(command, hook_input(t, "Stop"), env)  # the first read: the whole file
        for i in range(samples):
            times["python_pass"].append(_timed(floor, b"", env))
            for key, t, command in (
                ("stop_hook_50kb", small, stop),
                ("stop_hook_50mb", large, stop),
                ("stop_hook_in_process", lonely, stop_alone),
            ):
                t.write(*t.turn(f"sample {i}", f"answer {i}\n\ndone", tools=1))
                times[key].append(_timed(command, hook_input(t, "Stop"), env))
            times["session_start_hook"].append(
                _timed(start, hook_input(small, "SessionStart"), env)
            )
            run_json = json.dumps(
                {
                    "conversation_id": "bench-capture",
                    "owner": OWNER,
                    "run_id": f"bench-{i}",
                    "inputs": [{"entry_id": 2 * i, "text": f"sample {i}"}],
                    "outcome": {
                        "status": "answered",
                        "answer": {
                            "entry_id": 2 * i + 1,
                            "content": [{"type": "text", "text": f"answer {i}"}],
                        },
                    },
                }
            ).encode()
            times["capture_in_process"].append(_timed(capture, run_json, env))
    medians = {k: round(statistics.median(v), 1) for k, v in times.items()}
    floor_ms = medians["python_pass"]
    captured = _outbox_turns(relayed) + _outbox_turns(alone)
    return {
        "bench": "claude-code",
        "samples": samples,
        "transcripts_bytes": {
            "small": os.path.getsize(small.path),
            "large": os.path.getsize(large.path),
        },
        "median_ms": medians,
        "ratio_to_python_pass": {
            k: round(v / floor_ms, 2) for k, v in medians.items() if k != "python_pass"
        },
        "large_over_small": round(medians["stop_hook_50mb"] / medians["stop_hook_50kb"], 2),
        "in_process_hook_over_capture": round(
            medians["stop_hook_in_process"] / medians["capture_in_process"], 2
        ),
        "goal_ratio": GOAL_RATIO,
        "outbox_records": captured,
    }


def _outbox_turns(data: Path) -> int:
    """Records in the data directory's outbox files (each hook's turns reached the outbox)."""
    total = 0
    for path in (data / "data" / "outbox").glob("*.jsonl"):
        with open(path, "rb") as handle:
            total += sum(1 for _ in handle)
    return total
