"""``memhoncho doctor`` diagnoses broken settings instead of refusing them: its settings check
fails naming the file (or variable), the key and the reason, the checks that read the settings
are skipped saying so, and it exits 1 (a finding), as an operator runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memhoncho.cli import doctor
from memhoncho.testing.config import write_settings
from memhoncho.testing.processes import memhoncho_env

#: what an operator gets wrong, and what the settings check must name for each
BROKEN = {
    "a misspelt key": ({"partitons": 4}, None, ["memhoncho.json", "partitons"]),
    "a bad value": ({"partitions": 0}, None, ["memhoncho.json", "partitions", "1"]),
    "a file that does not parse": ('{"partitions": 4', None, ["memhoncho.json", "JSON"]),
    "a bad variable": ({}, {"MEMHONCHO_PARTITIONS": "0"}, ["MEMHONCHO_PARTITIONS"]),
}


def _doctor(config_dir: Path, data_dir: Path, extra: dict[str, str] | None, *argv: str) -> Any:
    env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key="k", extra=extra)
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "doctor", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_settings_fail_the_settings_check_and_skip_what_needs_them(
    config_dir: Path, data_dir: Path, case: str
) -> None:
    values, extra, named = BROKEN[case]
    if isinstance(values, str):
        (write_settings(config_dir)).write_text(values, encoding="utf-8")
    else:
        write_settings(config_dir, **values)
    done = _doctor(config_dir, data_dir, extra, "--json")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["settings"]["verdict"] == "fail"
    for word in named:
        assert word in checks["settings"]["detail"], (word, checks["settings"]["detail"])
    assert checks["data_dir"]["verdict"] == "pass"  # it reads no setting: still diagnosed
    assert {n for n, c in checks.items() if c["verdict"] == "skip"} == set(doctor.NEEDS_SETTINGS)
    for name in doctor.NEEDS_SETTINGS:
        assert "settings" in checks[name]["detail"]
    table = _doctor(config_dir, data_dir, extra)
    assert table.returncode == 1 and "FAIL  settings" in table.stdout
    assert "SKIP  honcho" in table.stdout
