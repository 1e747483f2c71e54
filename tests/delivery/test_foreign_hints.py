"""Two deployments on one Redis: a worker given a hint of the other deployment says so in its
log (both identities), counts it for the status view (JSON, table, /metrics, verdict) and
doctor fails; the hint is not acked into the void (the conversation's records of the worker's
own deployment are still delivered) and nothing loops (counted once, nothing re-published)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, identity, initialise
from memhoncho.status import render
from memhoncho.status.view import status_view
from memhoncho.store.foreign_hints import read_foreign_hints
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.processes import memhoncho_env, wait_until
from memhoncho.testing.runs import run_event

KEY = "sk-foreign-hints"
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


@pytest.fixture
def settings(standin_settings: Any, redis_url: str) -> dict[str, Any]:
    return standin_settings(broker_url=redis_url)  # type: ignore[no-any-return]


def _held(standin: HonchoStandIn, workspace_id: str, conversation: str) -> int:
    """How many messages the stand-in holds in the conversation's session."""
    session = ids.session_id(workspace_id, conversation)
    return standin.message_count(workspace_id, session)


def test_a_worker_given_another_deployments_hint_logs_counts_and_still_delivers_its_own(
    tmp_path: Path,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    celery_process: Callable[..., Any],
) -> None:
    ours = deployment
    # The other deployment: the same settings, broker and Honcho; its own data directory, as a
    # host whose MEMHONCHO_DATA_DIR names another folder than the workers'.
    theirs = Deployment(tmp_path / "other-config", tmp_path / "other-data")
    shutil.copytree(ours.config_dir, theirs.config_dir)
    initialise(theirs.data_dir)
    our_id = (identity(ours.data_dir) or {})["deployment_id"]
    their_id = (identity(theirs.data_dir) or {})["deployment_id"]
    assert our_id != their_id

    # Our record of "shared" waits with no hint (left for a relay that does not run).
    with Host(ours.config_dir, ours.data_dir, hints=False) as quiet:
        assert quiet.capture(run_event("shared", 0)).hint == "relay"
    worker = celery_process("worker", concurrency=1)
    with Host(theirs.config_dir, theirs.data_dir) as stray:
        assert stray.capture(run_event("shared", 7)).hint == "published"

    counted = wait_until(
        lambda: read_foreign_hints(ours.layout)["count"] or None, "the foreign hint counted"
    )
    assert counted == 1
    found = read_foreign_hints(ours.layout)
    assert found["ours"] == our_id and list(found["senders"]) == [their_id]
    assert found["senders"][their_id]["conversation_id"] == "shared"
    wait_until(lambda: "foreign_hint" in worker.log_text() or None, "the worker's log line")
    said = [line for line in worker.log_text().splitlines() if "another deployment" in line]
    assert said and their_id in said[0] and our_id in said[0], worker.log_text()[-2000:]
    # Not acked into the void: our own record of "shared" was delivered by that hint.
    wait_until(lambda: _held(standin, workspace_id, "shared"), "our record of shared delivered")
    # Nothing loops: a later hint of our own is delivered and the count stays one.
    with Host(ours.config_dir, ours.data_dir) as host:
        assert host.capture(run_event("ours", 0)).hint == "published"
    wait_until(lambda: _held(standin, workspace_id, "ours"), "our own conversation delivered")
    assert read_foreign_hints(ours.layout)["count"] == 1
    assert _held(standin, workspace_id, "shared") == 2  # ours alone: theirs never read here

    view = status_view(ours)
    assert view["foreign_hints"]["count"] == 1
    assert view["health"]["verdict"] == "failing"
    assert their_id in json.dumps(view["health"])
    table = render.table(view, width=400)
    assert "foreign_hints" in table and their_id in table
    assert "memhoncho_foreign_hints 1" in render.prometheus(view)
    env = memhoncho_env(config_dir=ours.config_dir, data_dir=ours.data_dir, api_key=None)
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["foreign_hints"]["verdict"] == "fail"
    assert their_id in checks["foreign_hints"]["detail"]
