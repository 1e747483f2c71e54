"""``bench backlog``'s before arm: the worker app with the stranded rule it had before a
queue's depth counted (``celery -A memhoncho.bench.backlog_app worker``): a hint mark older
than ``hint_marks.STALE_S`` is lost whatever its queue holds, and a received hint does not
renew its mark. Nothing else differs."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from celery import signals

        from memhoncho.store import hint_marks, stranded
        from memhoncho.worker import tasks  # noqa: F401 - its handler connects on import
        from memhoncho.worker.app import command_app

        stranded.QUEUED_MAX_S = hint_marks.STALE_S  # a busy queue's mark: lost as soon
        signals.task_received.disconnect(dispatch_uid="memhoncho.worker.tasks.hint_received")
        return command_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
