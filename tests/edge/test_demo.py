"""The main job, as a newcomer runs it: ``memhoncho demo`` in a subprocess."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho import ids
from memhoncho.capture.record import OUTBOX_ID_KEY
from memhoncho.cli.demo import DEMO_WORKSPACE
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


def _conversation(stdout: str) -> str:
    """The demo's conversation, which it names in its first line."""
    match = re.search(r"conversation (\S+) \(and its fork\)", stdout)
    assert match, stdout[:500]
    return match.group(1)


@pytest.mark.slow
def test_the_demo_delivers_in_order_once_and_its_claims_match_honcho(tmp_path: Path) -> None:
    with HonchoStandIn(llm=True) as honcho:
        for attempt in (1, 2):  # a kept data dir takes the demo again
            done = _run_demo(
                "--data-dir", str(tmp_path), "--honcho-url", honcho.url, "--honcho-key", "k"
            )
            assert done.returncode == 0, (attempt, done.stdout[-3000:] + done.stderr[-3000:])
            assert "demo complete" in done.stdout
        parent_id = _conversation(done.stdout)
        child_id = f"{parent_id}-fork"

        parent = honcho.messages(DEMO_WORKSPACE, ids.session_id(DEMO_WORKSPACE, parent_id))
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
        assert len(sessions) == 4, "per demo: the parent and exactly one clone for the fork"
        child_ledger = tmp_path / "state" / "ledger" / f"{ids.conversation_key(child_id)}.json"
        assert child_ledger.exists()
        assert "clone" in child_ledger.read_text()


@pytest.mark.slow
def test_the_demo_on_its_own_stand_in_exits_zero_and_cleans_up() -> None:
    done = _run_demo()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for claim in ("in capture order, each once", "prompt sections", "the status view"):
        assert claim in done.stdout
    # The warm shutdown takes seconds: the demo says so before, and each process once stopped.
    stopping = done.stdout.index("stopping the worker and beat (warm shutdown")
    assert stopping < done.stdout.index("demo-worker stopped") < done.stdout.index("demo complete")
    assert "demo-beat stopped" in done.stdout
    leftover = subprocess.run(
        ["pgrep", "-f", "demo-worker"], capture_output=True, text=True, check=False
    )
    assert leftover.stdout.strip() == "", "the demo left a worker running"
