"""``bench stranded``'s before arm: the worker app without its watchdog, as workers were
before issue 29 (``celery -A memhoncho.bench.stranded_app worker``). Nothing else differs."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from memhoncho.worker.app import command_app
        from memhoncho.worker.watchdog import Watchdog

        app = command_app()
        app.steps["worker"].discard(Watchdog)
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
