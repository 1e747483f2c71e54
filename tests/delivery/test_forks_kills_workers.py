"""A worker SIGKILLed at each step of a fork's resolution (between two steps), four rounds:
one session per child, no stray clone (real worker, real Redis, the stand-in). The kills inside
a held Honcho request are in ``test_forks_kills_held_workers.py``, so each file runs in a test
process of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forks_workers_support import API_KEY, KillPoint, fork_settings, kill_at_each_point

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import SettingsWriter

pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=API_KEY)]

#: every step a pool process is killed at, at once (no request held)
KILL_POINTS: list[KillPoint] = [
    ("intent-written", None),
    ("parent-tagged", None),
    ("cloning-written", None),
    ("cloned", None),
    ("clone-recorded", None),
    ("clone-tagged", None),
    ("parent-untagged", None),
    ("peers-ensured", None),
    ("decided", None),
    ("record-removed", None),
]


@pytest.fixture
def settings(standin_settings: SettingsWriter, redis_url: str) -> dict[str, Any]:
    return fork_settings(standin_settings, redis_url)


def test_a_worker_killed_at_each_step_of_a_fork_leaves_one_session_per_child(
    deployment: Deployment, host: Host, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    kill_at_each_point(
        deployment, host, standin, workspace_id, tmp_path / "kill-plan.json", KILL_POINTS
    )
