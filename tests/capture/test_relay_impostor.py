"""A relay socket another local user made is never the relay: ``memhoncho capture`` sends it
nothing and captures in its own process, and no forged answer reaches the caller.

Played as the attack was found: in a data directory whose ``state/`` another user may write
(the shared-group layout), uid ``nobody`` replaces ``state/relay.sock`` with a socket of its
own that answers every request with a forged ``captured`` (and a forged prompt for a hook).
The tests run as root on CI, the impostor as ``nobody`` through ``setpriv``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_users_support import NOBODY, as_nobody, as_root

from memhoncho import dirs, ids
from memhoncho.capture import relay_socket
from memhoncho.deployment import initialise
from memhoncho.store.layout import Layout
from memhoncho.store.outbox import Outbox
from memhoncho.testing.runs import run_event

SYSTEM_PYTHON = "/usr/bin/python3"  # readable by nobody (the test's venv may not be)
FORGED = {"exit": 0, "stdout": '{"status": "captured", "forged": true}\n', "stderr": ""}

IMPOSTOR = """
import json, os, socket, sys
path, log = sys.argv[1], sys.argv[2]
os.unlink(path) if os.path.lexists(path) else None
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o777)
server.listen(8)
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    with open(log, "ab") as out:
        out.write(data)
    conn.sendall(sys.argv[3].encode())
    conn.close()
"""

pytestmark = [
    as_root,
    pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason=f"needs {SYSTEM_PYTHON}"),
]


@pytest.fixture
def shared_data_dir() -> Iterator[Path]:
    """A data directory whose ``state/`` any user may write, reachable by ``nobody``."""
    root = Path(tempfile.mkdtemp(prefix="memhoncho-impostor-"))
    try:
        root.chmod(0o755)
        data = root / "data"
        initialise(data)
        data.chmod(0o755)
        (data / "state").mkdir(exist_ok=True)
        (data / "state").chmod(0o777)
        (root / "config").mkdir()
        yield data
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def impostor(shared_data_dir: Path) -> Iterator[Path]:
    """``nobody``'s socket at ``state/relay.sock``; yields the file it logs what it got to."""
    log = shared_data_dir.parent / "stolen.bin"
    log.touch()
    log.chmod(0o666)
    process = subprocess.Popen(
        as_nobody([SYSTEM_PYTHON, "-c", IMPOSTOR, dirs.relay_socket(shared_data_dir), str(log)])
        + [json.dumps(FORGED)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"listening", process.stderr
        assert os.stat(dirs.relay_socket(shared_data_dir)).st_uid == NOBODY
        yield log
    finally:
        process.kill()
        process.wait()


def _capture(data: Path, conversation: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(data.parent / "config")]
        + ["--data-dir", str(data), "capture"],
        input=json.dumps(run_event(conversation, 0)),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _records(data: Path, conversation: str) -> int:
    return len(Outbox(Layout(data)).read(ids.conversation_key(conversation)).records)


def test_a_socket_another_user_owns_gets_nothing_and_the_run_is_captured_here(
    shared_data_dir: Path, impostor: Path
) -> None:
    done = _capture(shared_data_dir, "c-stolen")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "captured" and "forged" not in answer
    assert "not this deployment's relay" in done.stderr and "uid 65534" in done.stderr
    assert impostor.read_bytes() == b"", "the raw run reached the impostor"
    assert _records(shared_data_dir, "c-stolen") == 1


def test_a_socket_chowned_to_the_deployment_but_served_by_another_user_is_refused_by_its_peer(
    shared_data_dir: Path, impostor: Path
) -> None:
    """The owner's check alone is not enough where the file's owner can be changed (or the
    socket was passed on): the peer's credentials (SO_PEERCRED) must be the deployment's."""
    os.chown(dirs.relay_socket(shared_data_dir), 0, 0)
    done = _capture(shared_data_dir, "c-peer")
    assert json.loads(done.stdout)["status"] == "captured"
    assert "served by uid 65534" in done.stderr
    time.sleep(0.2)  # the impostor got a connection and no request
    assert impostor.read_bytes() == b""
    assert _records(shared_data_dir, "c-peer") == 1


def test_a_hook_asking_the_impostor_for_the_prompt_sections_gets_no_answer(
    shared_data_dir: Path, impostor: Path
) -> None:
    """The Claude Code hooks ask the relay through ``relay_socket.request`` too: a forged
    answer would be printed into the person's session as memory."""
    answer = relay_socket.request(
        dirs.relay_socket(shared_data_dir), str(shared_data_dir.parent / "config"), {"op": "hook"}
    )
    assert answer is None
    assert impostor.read_bytes() == b""
