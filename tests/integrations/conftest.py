"""The integrations' tests: a stand-in (with an LLM, so chat answers) and the settings that
point at it; the broker is the embedded one, as ``memhoncho demo`` runs. ``scenario`` runs the
framework scenario through a real worker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from framework_scenario import KEY, Driver, More, Scenario, exercise

from memhoncho.capture.host import Host
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin


@pytest.fixture
def settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> dict[str, Any]:
    return point_at_standin(config_dir, standin, workspace_id, KEY)


@pytest.fixture
def scenario(
    host: Host, standin: HonchoStandIn, workspace_id: str, celery_process: Callable[..., Any]
) -> Scenario:
    """Run the framework scenario with the driver ``make(host)`` builds, then ``more``, through
    one worker."""

    def run(make: Callable[[Host], Driver], more: More | None = None) -> None:
        celery_process("worker", concurrency=1)
        exercise(make(host), host, standin, workspace_id, more)

    return run
