"""The main job, as a newcomer runs it: ``memhoncho demo`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho import ids
from memhoncho.cli.demo import CHILD, DEMO_WORKSPACE, PARENT
from memhoncho.models import OUTBOX_ID_KEY
from memhoncho.testing import HonchoStandIn

DEMO_TIMEOUT_S = 120


def _run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "demo", *args],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow
def test_the_demo_delivers_in_order_once_and_its_claims_match_honcho(tmp_path: Path) -> None:
    with HonchoStandIn(llm=True) as honcho:
        done = _run_demo(
            "--data-dir", str(tmp_path), "--honcho-url", honcho.url, "--honcho-key", "k"
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "demo complete" in done.stdout

        parent = honcho.messages(DEMO_WORKSPACE, ids.session_id(DEMO_WORKSPACE, PARENT))
        outbox_ids = [m["metadata"][OUTBOX_ID_KEY] for m in parent]
        assert len(outbox_ids) == len(set(outbox_ids)), "a message was delivered twice"
        assert [m["metadata"]["entry_id"] for m in parent] == sorted(
            m["metadata"]["entry_id"] for m in parent
        )
        parts = [m for m in parent if m["metadata"].get("parts")]
        assert len(parts) == 2, "the long text is split into two parts"
        unanswered = [m for m in parent if m["metadata"].get("unanswered")]
        assert len(unanswered) == 1

        sessions = honcho.sessions(DEMO_WORKSPACE)
        assert len(sessions) == 2, "the parent and exactly one clone for the fork"
        child_ledger = tmp_path / "state" / "ledger" / f"{ids.conversation_key(CHILD)}.json"
        assert child_ledger.exists()
        assert "clone" in child_ledger.read_text()


def _processes_under(folder: Path) -> list[int]:
    """Pids whose MEMHONCHO_DATA_DIR lies below ``folder``: this test's demo's, nobody else's
    (a name like ``demo-worker`` is shared with every other demo on the machine)."""
    found = []
    marker = f"MEMHONCHO_DATA_DIR={folder}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if any(item.startswith(marker) for item in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_the_demo_on_its_own_stand_in_exits_zero_and_cleans_up(tmp_path: Path) -> None:
    # The demo makes its own data dir with mkdtemp: under this test's TMPDIR, so its processes
    # and its folder are told apart from any other demo running on the machine.
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for claim in ("in capture order, each once", "prompt sections", "the status view"):
        assert claim in done.stdout
    # The warm shutdown takes seconds: the demo says so before, and each process once stopped.
    stopping = done.stdout.index("stopping the worker and beat (warm shutdown")
    assert stopping < done.stdout.index("demo-worker stopped") < done.stdout.index("demo complete")
    assert "demo-beat stopped" in done.stdout
    assert _processes_under(tmp_path) == [], "the demo left a worker running"
    assert not list(tmp_path.glob("memhoncho-demo-*")), "the demo left its data dir behind"
