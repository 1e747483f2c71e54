"""Thin Celery tasks: take ids, call a service function, map its error to retry or give up.

Each task has an explicit wire name; ``routing.TASK_QUEUES`` says where it goes. Services never
import this module.
"""

from __future__ import annotations

import logging
from typing import Any

from memhoncho.celery_app import app
from memhoncho.context import Context

log = logging.getLogger(__name__)


def task_context() -> Context:
    """The dirs the app was built for (from ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR``)."""
    return Context.from_dirs(app.conf.memhoncho_config_dir, app.conf.memhoncho_data_dir)


# At most once (acks_late off): a recall nobody waits for any more must not run twice, and a
# remember must not store its conclusion twice. The host's wait and the task's expiry agree.
@app.task(name="memhoncho.recall", ignore_result=False, acks_late=False)
def recall(name: str, arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """Run one recall tool for a waiting host; answers ``{"ok", "result" | "error"}``."""
    from memhoncho import tools

    return tools.outcome(task_context(), name, arguments, owner)
