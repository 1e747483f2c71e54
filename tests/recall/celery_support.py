"""What the tests of recall through a worker share: settings on a real Redis, and a worker that
consumes only ``memhoncho.recall``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.processes import CeleryProcess
from memhoncho.worker import routing


def settings_fixture(api_key: str) -> Any:
    """A ``settings`` fixture pointing at the stand-in (whose key is ``api_key``) over Redis."""

    @pytest.fixture
    def settings(
        config_dir: Path, standin: HonchoStandIn, workspace_id: str, redis_url: str
    ) -> dict[str, Any]:
        return point_at_standin(config_dir, standin, workspace_id, api_key, broker_url=redis_url)

    return settings


@pytest.fixture
def recall_worker(celery_process: Callable[..., CeleryProcess]) -> None:
    """A worker consuming ONLY memhoncho.recall: no delivery can ever be ahead of a recall."""
    celery_process("worker", queues=[routing.RECALL_QUEUE], concurrency=1)
