"""What the recall tool tests share: the key that must never show, two users, the timeouts, the
settings on the stand-in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memhoncho.errors import (
    MemhonchoError,
)
from memhoncho.recall import tools
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin

SECRET_KEY = "sk-memhoncho-tools-SECRET-5a4b3c"
ANA = "ana@example.com"
BOB = "bob@example.com"
FAST_TIMEOUT_S = 0.4  # seconds: the tools' timeout in the timeout tests
FAULT_SLEEP_S = 1.2  # seconds a timeout fault holds a request: past FAST_TIMEOUT_S


@pytest.fixture
def settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> dict[str, Any]:
    return point_at_standin(config_dir, standin, workspace_id, SECRET_KEY)


def assert_names_memhoncho_not_the_key(exc: MemhonchoError) -> None:
    assert exc.message.startswith("memhoncho")
    shown = str(exc) + json.dumps(tools.error_payload(exc))
    assert SECRET_KEY not in shown
