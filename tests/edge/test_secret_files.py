"""Secrets at rest: ``memhoncho init --api-key-stdin`` writes the key 0600 whatever the umask,
and ``doctor`` fails on a key file other users can read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.cli import doctor
from memhoncho.deployment import Deployment, initialise
from memhoncho.settings import SECRETS_FILE
from memhoncho.testing.config import write_api_key, write_settings

KEY = "sk-at-rest-0123456789abcdef"


def _init(tmp_path: Path, umask: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    code = (
        "import os, sys; os.umask(int(sys.argv.pop(1), 8));"
        " from memhoncho.cli import main; sys.exit(main())"
    )
    return subprocess.run(
        [sys.executable, "-c", code, umask, "--config-dir", str(tmp_path / "config")]
        + ["--data-dir", str(tmp_path / "data"), "init", "--api-key-stdin", "--json"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("umask", ["000", "022"])
def test_init_writes_the_key_0600_in_a_0700_folder_whatever_the_umask(
    tmp_path: Path, umask: str
) -> None:
    done = _init(tmp_path, umask, KEY + "\n")
    assert done.returncode == 0, done.stderr
    secrets = tmp_path / "config" / SECRETS_FILE
    assert json.loads(done.stdout)["api_key_file"] == str(secrets)
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "config").stat().st_mode) == 0o700
    assert Deployment.from_dirs(tmp_path / "config", tmp_path / "data").api_key() == KEY
    assert KEY not in done.stdout + done.stderr


def test_init_without_a_key_on_stdin_is_a_config_error_and_writes_nothing(tmp_path: Path) -> None:
    done = _init(tmp_path, "022", "\n")
    assert done.returncode == 2
    assert json.loads(done.stderr.strip().splitlines()[-1])["code"] == "ERR_CONFIG"
    assert not (tmp_path / "config" / SECRETS_FILE).exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_doctor_fails_on_a_key_file_other_users_can_read(tmp_path: Path, mode: int) -> None:
    config, data = tmp_path / "config", tmp_path / "data"
    write_settings(config)
    secrets = write_api_key(config, KEY)
    initialise(data)
    secrets.chmod(mode)
    check = doctor.check_key(Deployment.from_dirs(config, data))
    assert check.verdict == doctor.FAIL
    assert "other users can read it" in check.detail and KEY not in check.detail
    secrets.chmod(0o600)
    assert doctor.check_key(Deployment.from_dirs(config, data)).verdict == doctor.PASS
