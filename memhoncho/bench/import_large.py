"""``memhoncho bench import-large``: a large ChatGPT export really imported (not a dry run),
whole process, as a user runs it: peak memory against the 200 MB bound, time, turns and
megabytes a second into the outbox.

The export (``testing.exports.write_big_chatgpt``: ``--samples`` MiB, default 1,024, of
10-turn conversations with 20,000-character answers) is generated first, outside the figure.
The import runs under a parent of its own so ``RUSAGE_CHILDREN`` is its peak alone. It
needs about twice the export's size on disk (the export and the outbox), in the system's
temporary folder (``TMPDIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memhoncho.deployment import initialise
from memhoncho.testing import exports

DEFAULT_MIB = 1024
MEMORY_BOUND_MB = 200
#: run in a parent of its own: its RUSAGE_CHILDREN is the import's peak alone
_MEASURE = (
    "import resource as r, subprocess, sys; done = subprocess.run(sys.argv[2:]);"
    " open(sys.argv[1], 'w').write(str(r.getrusage(r.RUSAGE_CHILDREN).ru_maxrss));"
    " sys.exit(done.returncode)"
)


def run(args: argparse.Namespace) -> dict[str, Any]:
    mib = getattr(args, "samples", None) or DEFAULT_MIB
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-import-large-") as tmp:
        root = Path(tmp)
        export = root / "conversations.json"
        started = time.perf_counter()
        conversations = exports.write_big_chatgpt(export, mib << 20)
        generated_s = time.perf_counter() - started
        size = export.stat().st_size
        (root / "config").mkdir()
        initialise(root / "data")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
        peak_file = root / "peak-kb"
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, str(peak_file), sys.executable, "-m", "memhoncho",
             "--config-dir", str(root / "config"), "--data-dir", str(root / "data"),
             "import", str(export), "--owner", "bench", "--json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"memhoncho import exited {done.returncode}: {done.stderr[-500:]}")
        captured = json.loads(done.stdout)["totals"].get("captured", 0)
        peak_mb = int(peak_file.read_text()) / 1024
    return {
        "export_mib": round(size / (1 << 20), 1),
        "conversations": conversations,
        "turns": captured,
        "generate_s": round(generated_s, 1),
        "import_process_s": round(elapsed, 1),
        "turns_per_s": round(captured / elapsed),
        "export_mib_per_s": round(size / (1 << 20) / elapsed, 1),
        "import_peak_rss_mb": round(peak_mb, 1),
        "memory_bound_mb": MEMORY_BOUND_MB,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
