"""The integrations' tests: a stand-in (with an LLM, so chat answers) and the settings that
point at it; the broker is the embedded one, as ``memhoncho demo`` runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from framework_scenario import KEY

from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin


@pytest.fixture
def settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> dict[str, Any]:
    return point_at_standin(config_dir, standin, workspace_id, KEY)
