"""A host's own test suite can use memhoncho's fixtures: ``-p memhoncho.testing.pytest_plugin``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HOST_SUITE = textwrap.dedent(
    """
    import pytest

    from memhoncho.testing.config import write_api_key, write_settings

    pytestmark = pytest.mark.standin(api_key="host-suite-key")


    @pytest.fixture
    def settings(config_dir, standin, workspace_id):
        values = {"base_url": standin.url, "workspace_id": workspace_id}
        write_settings(config_dir, **values)
        write_api_key(config_dir, "host-suite-key")
        return values


    def test_a_host_captures_into_the_given_folders(host, deployment, data_dir, standin):
        run = {
            "conversation_id": "c-1",
            "owner": None,
            "run_id": "r-1",
            "inputs": [{"entry_id": 1, "text": "hello"}],
            "outcome": {"status": "unanswered"},
        }
        assert host.capture(run).status == "captured"
        assert deployment.data_dir == data_dir
        assert any(data_dir.rglob("*.jsonl"))
        assert standin.api_key == "host-suite-key"
    """
)


def test_a_host_suite_gets_the_dirs_the_stand_in_and_a_host_from_the_plugin(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "host_suite"
    suite.mkdir()
    (suite / "test_host.py").write_text(HOST_SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMHONCHO_", "PYTEST_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "memhoncho.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(suite),
            "-c",
            os.devnull,
            str(suite),
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
