"""Workers and beat started with Celery's own commands refuse a data directory that is not an
initialised memhoncho one (a mistyped ``MEMHONCHO_DATA_DIR``): the error's code and sentence,
exit 2, and nothing created. The documented ways to start them initialise first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.cli import exits
from memhoncho.deployment import IDENTITY_FILE, identity
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.worker import app as worker_app

START_TIMEOUT_S = 60.0  # seconds a refused command may take to exit (imports included)


def _celery(kind: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", kind, "-l", "INFO"]
    return subprocess.run(
        [*args, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )


def test_a_refused_celery_command_exits_with_the_memhoncho_commands_refusal_code() -> None:
    assert worker_app.REFUSED_EXIT == exits.REFUSED


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["worker", "beat"])
def test_a_worker_or_beat_on_a_mistyped_data_dir_exits_2_with_the_error_and_creates_nothing(
    tmp_path: Path, config_dir: Path, kind: str
) -> None:
    typo = tmp_path / "dta"
    env = memhoncho_env(config_dir=config_dir, data_dir=typo)
    # beat's schedule beside the test, not in the typo: the refusal must come before it anyway
    extra = ["-s", str(tmp_path / "schedule")] if kind == "beat" else ["-P", "solo"]
    done = _celery(kind, env, *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("memhoncho: ERR_NOT_INITIALISED: "), done.stderr
    assert str(typo) in message and "MEMHONCHO_DATA_DIR" in message
    assert "memhoncho init" in message
    assert "Traceback" not in done.stderr and "Unable to load" not in done.stderr
    assert not typo.exists()
    assert not list(tmp_path.glob("schedule*"))


@pytest.mark.slow
def test_a_worker_adopts_a_data_dir_made_before_identities(
    tmp_path: Path, config_dir: Path
) -> None:
    legacy = tmp_path / "legacy"
    (legacy / "data" / "outbox").mkdir(parents=True)  # what an older memhoncho left there
    env = memhoncho_env(config_dir=config_dir, data_dir=legacy)
    with CeleryProcess("worker", env, pool="solo"):
        pass
    assert (legacy / IDENTITY_FILE).exists() and identity(legacy) is not None


@pytest.mark.slow
def test_the_demo_initialises_its_folder_before_its_worker_and_beat_start(
    tmp_path: Path,
) -> None:
    """``memhoncho demo --data-dir`` on a folder that does not exist yet still runs."""
    from memhoncho.cli import demo

    folder = tmp_path / "new-demo"
    running = demo.Demo(folder, out=lambda _: None)
    try:
        running.start()  # raises if the worker or beat exited early
        assert identity(folder) is not None
    finally:
        running.stack.close()
