"""Importing memhoncho and constructing a Host touch nothing outside the two given folders."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Run in a fresh interpreter, so that import-time effects are real (not already paid for by an
# earlier test in this process).
SCRIPT = textwrap.dedent(
    """
    import sys

    import memhoncho
    import memhoncho.celery_app
    import memhoncho.cli.doctor
    import memhoncho.status.view
    import memhoncho.worker.tasks
    from memhoncho import Host

    host = Host(sys.argv[1], sys.argv[2], init=True)
    host.close()
    print("ok")
    """
)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_importing_memhoncho_and_constructing_a_host_create_nothing_outside_its_folders(
    tmp_path: Path,
) -> None:
    # HOME is a file: anything that tries to make a folder below it fails loudly.
    outside = tmp_path / "outside"
    outside.mkdir()
    home = outside / "home"
    home.write_text("not a folder\n")
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MEMHONCHO_", "HONCHO_", "XDG_"))
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_RUNTIME_DIR=str(home / "run"),
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config_dir), str(data_dir)],
        env=env,
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "Traceback" not in done.stderr
    assert _files(outside) == ["home"]
    assert home.read_text() == "not a folder\n"
