"""A worker SIGKILLed inside each Honcho request of a fork's resolution (the stand-in holds
the request, the pool process dies in it), four rounds: one session per child, no stray clone.
The kills between steps are in ``test_forks_kills_workers.py``."""

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

#: (the step after which the next request is held, the request) a pool process dies inside
KILL_POINTS: list[KillPoint] = [
    ("intent-written", {"method": "PUT", "path_contains": "/sessions/"}),  # tagging the parent
    ("cloning-written", {"method": "POST", "path_contains": "/clone"}),  # the clone itself
    ("clone-recorded", {"method": "PUT", "path_contains": "/sessions/"}),  # tagging the clone
    ("clone-tagged", {"method": "PUT", "path_contains": "/sessions/"}),  # untagging the parent
    ("parent-untagged", {"method": "PUT", "path_contains": "/config"}),  # the child's peers
    ("peers-ensured", {"method": "POST", "path_contains": "/messages/list"}),  # its anchors
]


@pytest.fixture
def settings(standin_settings: SettingsWriter, redis_url: str) -> dict[str, Any]:
    return fork_settings(standin_settings, redis_url)


def test_a_worker_killed_inside_each_request_of_a_fork_leaves_one_session_per_child(
    deployment: Deployment, host: Host, standin: HonchoStandIn, workspace_id: str, tmp_path: Path
) -> None:
    kill_at_each_point(
        deployment, host, standin, workspace_id, tmp_path / "kill-plan.json", KILL_POINTS
    )
