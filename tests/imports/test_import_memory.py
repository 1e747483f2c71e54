"""A 1 GiB ChatGPT export read within the memory bound (``--dry-run``: the reading alone).

The stored path of the same export is measured, not tested (minutes, and about 1 GB of
outbox): ``memhoncho bench import-large`` (docs/import.md, "How fast, how big"). An import
killed half-way and run again: ``test_import_workers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.deployment import Deployment
from memhoncho.testing import exports

MEMORY_BOUND_MB = 200
EXPORT_BYTES = 1 << 30  # 1 GiB

pytestmark = pytest.mark.slow


def test_a_1_gib_chatgpt_export_is_read_in_at_most_200_mb(
    deployment: Deployment, tmp_path: Path
) -> None:
    export = tmp_path / "conversations.json"
    written = exports.write_big_chatgpt(export, EXPORT_BYTES)
    peak_file = tmp_path / "peak-kb"
    # a parent of its own, so RUSAGE_CHILDREN is the import's peak alone
    measure = (
        "import resource as r, subprocess, sys; done = subprocess.run(sys.argv[2:]);"
        " open(sys.argv[1], 'w').write(str(r.getrusage(r.RUSAGE_CHILDREN).ru_maxrss));"
        " sys.exit(done.returncode)"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, str(peak_file), sys.executable, "-m", "memhoncho",
         "--config-dir", str(deployment.config_dir), "--data-dir", str(deployment.data_dir),
         "import", str(export), "--owner", "ana", "--dry-run", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert len(summary["conversations"]) == written
    assert summary["totals"] == {"would-capture": written * 10}
    peak_mb = int(peak_file.read_text()) / 1024
    assert peak_mb <= MEMORY_BOUND_MB, f"peak {peak_mb:.0f} MB"
