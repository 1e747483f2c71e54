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


# ---- beat: the outbox sweep and the representation refresh ------------------------------

REFRESH_MAX_RETRIES = 5  # a refresh that keeps failing waits for the next beat instead


def _send_delivery(conversation_id: str) -> bool:
    app.send_task("memhoncho.deliver", args=[conversation_id], ignore_result=True)
    return True


@app.task(name="memhoncho.outbox_sweep", ignore_result=True)
def outbox_sweep() -> dict[str, Any]:
    """Resolve forks, re-drive pending deliveries, compact the outboxes (``sweep.sweep``)."""
    from memhoncho import sweep

    report = sweep.sweep(task_context(), _send_delivery)
    return report.model_dump(mode="json", exclude={"conversations"})


@app.task(name="memhoncho.refresh_representations", ignore_result=True)
def refresh_representations() -> int:
    """Enqueue a refresh of every recently delivered conversation whose snapshot is old."""
    from memhoncho import memory

    due = memory.refresh_due(task_context())
    for conversation_id in due:
        app.send_task(
            "memhoncho.refresh_representation", args=[conversation_id], ignore_result=True
        )
    return len(due)


@app.task(
    name="memhoncho.refresh_representation",
    bind=True,
    ignore_result=True,
    max_retries=REFRESH_MAX_RETRIES,
)
def refresh_representation(self: Any, conversation_id: str) -> None:
    """Fetch one conversation's representation and session context into its cache file."""
    from memhoncho import honcho, memory
    from memhoncho.errors import MemhonchoError

    try:
        memory.refresh_representation(task_context(), conversation_id)
    except MemhonchoError as exc:
        decision = honcho.classify(exc, self.request.retries + 1)
        if decision.retry and self.request.retries < REFRESH_MAX_RETRIES:
            raise self.retry(countdown=decision.delay_s or 1.0) from None
        log.warning(
            "representation refresh gave up; the next beat tries again",
            extra={"action": "refresh_gave_up", "code": exc.code},
        )
