"""``memhoncho bench cli``: what an operator or an agent's hook waits for, whole processes.

Medians, measured in one run and interleaved sample by sample, of fresh processes:
``python -c pass`` (the interpreter's own floor); ``memhoncho status`` on a store of 10k
conversations (the status bench's fixture); and ``memhoncho capture`` of one 2.6 KB run (a new
run id each time, on a conversation with a backlog). Each command is measured as deployed, with
a ``memhoncho relay`` running on its data directory (the relay runs beside the workers and
answers both commands on its socket, ``relay_socket.py``): ``status`` (the relay's warm view,
at most ``--max-age`` 2 s old, ``status/warm.py``) and ``capture``; and as its fallbacks, on
another data directory with no relay: ``status_in_process`` and ``capture_in_process``. Also
``status_fresh``: through the relay with ``--max-age 0`` (a census read per request). Goals:
``status`` and ``capture`` <= 3x the floor. Also the biggest imports of one in-process capture
(``python -X importtime``), and ``python -c "from pydantic import BaseModel"``: the floor of
any process that validates with pydantic, as the fallbacks do (settings, the run): the reason
they cannot meet the goal.

Every conversation of the status fixture has its hint waiting (a fresh hint mark, dated past
the bench's end), so the relay beside it has nothing to publish; it still runs its scans, and
its look at the marks every 0.25 s stats all 10k of them (more than a deployment whose workers
keep up has: the figures are not flattered by it).
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
from memhoncho.deployment import Deployment, initialise
from memhoncho.settings import SECRETS_FILE, SETTINGS_FILE
from memhoncho.store import hint_marks
from memhoncho.store.layout import Layout, keys_in
from memhoncho.testing.relay import RelayProcess

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


def _hints_waiting(layout: Layout, for_s: float) -> None:
    """A fresh hint mark on every conversation, dated ``for_s`` ahead: their hints wait."""
    ahead = time.time() + for_s
    for key in keys_in(layout.outbox_dir, ".jsonl"):
        hint_marks.claim(layout, key)
        os.utime(hint_marks.mark_path(layout, key), (ahead, ahead))


def _status_store(config: Path, data: Path) -> Deployment:
    deployment = Deployment(config, data)
    build_store(deployment, CONVERSATIONS)
    _hints_waiting(deployment.layout, for_s=3600)
    return deployment


def _measure(root: Path, samples: int) -> dict[str, Any]:
    status_dirs = _status_store(root / "status-config", root / "status-data")
    alone_status = _status_store(root / "status-config", root / "status-alone-data")
    capture_config, capture_data = root / "capture-config", root / "capture-data"
    (capture_config / SETTINGS_FILE).parent.mkdir(parents=True)
    (capture_config / SETTINGS_FILE).write_text(json.dumps({"max_pending_batches": 10**6}))
    (capture_config / SECRETS_FILE).write_text(json.dumps({"api-key": "bench-key"}))
    memhoncho = _command()
    floor = [sys.executable, "-c", "pass"]
    pydantic_floor = [sys.executable, "-c", "from pydantic import BaseModel"]
    status_args = ["--config-dir", str(status_dirs.config_dir)]
    status = [*memhoncho, *status_args, "--data-dir", str(status_dirs.data_dir), "status"]
    status_fresh = [*status, "--max-age", "0"]
    status_alone = [
        *memhoncho,
        *status_args,
        *("--data-dir", str(alone_status.data_dir), "status"),
    ]
    capture_args = ["--config-dir", str(capture_config), "--data-dir", str(capture_data)]
    capture = [*memhoncho, *capture_args, "capture"]
    initialise(root / "alone-data")  # as `memhoncho init` would: capture refuses a new folder
    alone_args = ["--config-dir", str(capture_config), "--data-dir", str(root / "alone-data")]
    capture_alone = [*memhoncho, *alone_args, "capture"]
    with (
        RelayProcess(capture_config, capture_data) as relay,
        RelayProcess(status_dirs.config_dir, status_dirs.data_dir) as status_relay,
    ):
        # Warm: the file cache, the status summaries (saved by a first read), a conversation
        # with a backlog in both data dirs, the interpreter's bytecode caches.
        _timed(status)
        _timed(status_alone)
        for i in range(10):
            _timed(capture, _run_json(i))
            _timed(capture_alone, _run_json(i))
        times: dict[str, list[float]] = {
            "python_pass": [],
            "pydantic_import": [],
            "status": [],
            "status_fresh": [],
            "status_in_process": [],
            "capture": [],
            "capture_in_process": [],
        }
        for i in range(samples):
            times["python_pass"].append(_timed(floor))
            times["pydantic_import"].append(_timed(pydantic_floor))
            times["status"].append(_timed(status))
            times["status_fresh"].append(_timed(status_fresh))
            times["status_in_process"].append(_timed(status_alone))
            times["capture"].append(_timed(capture, _run_json(100 + i)))
            times["capture_in_process"].append(_timed(capture_alone, _run_json(100 + i)))
        # The figures are the relay path's only if the relays answered every one of them.
        for running in (relay, status_relay):
            if running.proc is None or running.proc.poll() is not None:
                raise RuntimeError(f"a relay stopped during the bench: {running.stderr()!r}")
    figures = {name: _summary(values) for name, values in times.items()}
    base = figures["python_pass"]["median_ms"]
    ratios = {
        name: round(figures[name]["median_ms"] / base, 2)
        for name in figures
        if name != "python_pass"
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
        "goal_path": "relay: status and capture answered on a running memhoncho relay's socket;"
        " status_in_process and capture_in_process are the fallbacks when no relay runs",
        "capture_in_process_top_imports_ms": _top_imports(
            [*alone_args, "capture"], _run_json(10_000 + samples)
        ),
        "cpus": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
    }
