"""Thin Celery tasks: take ids, call a service function, map its error to retry or give up.

Each task has an explicit wire name; ``routing.TASK_QUEUES`` says where it goes. Services never
import this module.
"""

from __future__ import annotations

import logging

from memhoncho.celery_app import app
from memhoncho.context import Context

log = logging.getLogger(__name__)


def task_context() -> Context:
    """The dirs the app was built for (from ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR``)."""
    return Context.from_dirs(app.conf.memhoncho_config_dir, app.conf.memhoncho_data_dir)
