"""``memhoncho bench cli``: what an operator or an agent's hook waits for, whole processes.

Medians, measured in one run and interleaved sample by sample, of three fresh processes:
``python -c pass`` (the interpreter's own floor), ``memhoncho status`` on a store of 10k
conversations (the status bench's fixture, its summary cache saved by a first run), and
``memhoncho capture`` of one 2.6 KB run (a new run id each time, on a conversation with a
backlog). Goals: each command <= 3x the floor. Also the biggest imports of one capture process
(``python -X importtime``), which say what is left to defer, and a fourth process,
``python -c "from pydantic import BaseModel"``: the floor of any process that validates with
pydantic, which both commands do (settings, the run), measured in the same run.
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

from memhoncho.bench.status import CONVERSATIONS, build_store
from memhoncho.deployment import Deployment
from memhoncho.settings import SECRETS_FILE, SETTINGS_FILE

DEFAULT_SAMPLES = 20
GOAL_RATIO = 3.0
RUN_BYTES = 2600  # the size of the captured run's JSON
TOP_IMPORTS = 8  # top-level imports listed from one capture process
QUESTION = "How should I plan the garden beds for next spring? "
ANSWER = "Start with the soil: test it, then add compost where it is thin. "


def _command() -> list[str]:
    """The installed ``memhoncho`` script when it sits beside this interpreter (as users run
    it), else ``python -m memhoncho``."""
    script = Path(sys.executable).with_name("memhoncho")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memhoncho"]


def _run_json(i: int) -> bytes:
    """Run ``i`` of the hook's conversation, padded to ``RUN_BYTES`` of JSON."""
    run: dict[str, Any] = {
        "conversation_id": "hook-conversation",
        "owner": "ana@example.com",
        "run_id": f"run-{i:06d}",
        "inputs": [{"entry_id": 2 * i, "text": ""}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 2 * i + 1, "content": [{"type": "text", "text": ""}]},
        },
    }
    room = RUN_BYTES - len(json.dumps(run))
    question, answer = room // 3, room - room // 3
    run["inputs"][0]["text"] = (QUESTION * (question // len(QUESTION) + 1))[:question]
    run["outcome"]["answer"]["content"][0]["text"] = (ANSWER * (answer // len(ANSWER) + 1))[:answer]
    return json.dumps(run).encode()


def _timed(argv: list[str], stdin: bytes | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[-1]} failed ({done.returncode}): {done.stderr[-2000:]!r}")
    return elapsed * 1000


def _top_imports(argv: list[str], stdin: bytes) -> list[tuple[str, float]]:
    """Cumulative ms of the top-level imports of one process, the largest first."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memhoncho", *argv],
        input=stdin,
        capture_output=True,
        check=True,
    )
    top: dict[str, float] = {}
    for line in done.stderr.decode(errors="replace").splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[0].startswith("import time:"):
            continue
        name = parts[2].rstrip()
        if name.startswith(" ") and not name.startswith("  "):  # depth 1: top level
            try:
                top[name.strip()] = round(int(parts[1]) / 1000, 1)
            except ValueError:
                continue
    return sorted(top.items(), key=lambda item: -item[1])[:TOP_IMPORTS]


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    env_backup = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("MEMHONCHO_")}
    try:
        with tempfile.TemporaryDirectory(prefix="memhoncho-bench-cli-") as tmp:
            return _measure(Path(tmp), samples)
    finally:
        os.environ.update(env_backup)


def _measure(root: Path, samples: int) -> dict[str, Any]:
    status_dirs = Deployment(root / "status-config", root / "status-data")
    build_store(status_dirs, CONVERSATIONS)
    capture_config, capture_data = root / "capture-config", root / "capture-data"
    (capture_config / SETTINGS_FILE).parent.mkdir(parents=True)
    (capture_config / SETTINGS_FILE).write_text(json.dumps({"max_pending_batches": 10**6}))
    (capture_config / SECRETS_FILE).write_text(json.dumps({"api-key": "bench-key"}))
    memhoncho = _command()
    floor = [sys.executable, "-c", "pass"]
    pydantic_floor = [sys.executable, "-c", "from pydantic import BaseModel"]
    status = [
        *memhoncho,
        *("--config-dir", str(status_dirs.config_dir)),
        *("--data-dir", str(status_dirs.data_dir), "status"),
    ]
    capture_args = ["--config-dir", str(capture_config), "--data-dir", str(capture_data)]
    capture = [*memhoncho, *capture_args, "capture"]
    # Warm: the file cache, the status summary (saved by its first read), a conversation with
    # a backlog, the interpreter's bytecode caches.
    _timed(status)
    for i in range(10):
        _timed(capture, _run_json(i))
    times: dict[str, list[float]] = {
        "python_pass": [],
        "pydantic_import": [],
        "status": [],
        "capture": [],
    }
    for i in range(samples):
        times["python_pass"].append(_timed(floor))
        times["pydantic_import"].append(_timed(pydantic_floor))
        times["status"].append(_timed(status))
        times["capture"].append(_timed(capture, _run_json(100 + i)))
    figures = {name: _summary(values) for name, values in times.items()}
    base = figures["python_pass"]["median_ms"]
    ratios = {
        name: round(figures[name]["median_ms"] / base, 2)
        for name in ("pydantic_import", "status", "capture")
    }
    return {
        "samples": samples,
        "conversations": CONVERSATIONS,
        "run_bytes": len(_run_json(0)),
        "command": Path(memhoncho[0]).name if len(memhoncho) == 1 else "python -m memhoncho",
        **figures,
        "ratio": ratios,
        "goal_ratio": GOAL_RATIO,
        "goal_met": {name: ratios[name] <= GOAL_RATIO for name in ("status", "capture")},
        "capture_top_imports_ms": _top_imports(
            [*capture_args, "capture"], _run_json(10_000 + samples)
        ),
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
    }
