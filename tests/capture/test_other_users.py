"""Another local user and a deployment's data directory: their capture is refused for good
(exit 2, never "retry"), and they can read nothing memhoncho wrote. Run as ``nobody`` through
``setpriv`` (the tests run as root on CI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_users_support import as_nobody, as_root

from memhoncho.capture.host import Host
from memhoncho.deployment import IDENTITY_FILE
from memhoncho.testing.runs import run_event

pytestmark = as_root


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder ``nobody`` may enter, with the deployment's folders inside."""
    made = Path(tempfile.mkdtemp(prefix="memhoncho-other-users-"))
    try:
        made.chmod(0o755)
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _as_nobody(root: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    env["HOME"] = str(root)
    return subprocess.run(
        as_nobody([sys.executable, *argv]),
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_another_users_capture_is_a_permanent_refusal_not_a_retry(root: Path) -> None:
    data = root / "data"
    (root / "config").mkdir()
    with Host(root / "config", data, init=True) as host:
        host.capture(run_event("c-own", 0))
    # the folders of an older layout, which nobody could enter and read: still no write
    for path in (data, data / "data", root / "config"):
        path.chmod(0o755)
    (data / IDENTITY_FILE).chmod(0o644)
    done = _as_nobody(
        root,
        "-m",
        "memhoncho",
        "--config-dir",
        str(root / "config"),
        "--data-dir",
        str(data),
        "capture",
        stdin=json.dumps(run_event("c-theirs", 0)),
    )
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stderr)["code"] == "ERR_STORE_PERMISSION"


def test_nothing_memhoncho_wrote_can_be_read_by_another_user(root: Path) -> None:
    data = root / "data"
    with Host(root / "config", data, init=True) as host:
        host.capture(run_event("c-private", 0))
        host.conversation_forked("c-private", "c-fork", at_entry=1)
    data.chmod(0o755)  # even with the top folder opened by hand
    written = [str(p) for p in data.rglob("*") if p.is_file()]
    probe = (
        "import sys\n"
        "readable = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'rb').read(1); readable.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('\\n'.join(readable))\n"
    )
    done = _as_nobody(root, "-c", probe, *written)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"readable by another user:\n{done.stdout}"
