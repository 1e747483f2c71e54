"""Loaded into a test's Celery worker (``celery worker -I fork_kill_hook``): real SIGKILLs.

At the step of a fork resolution named in the plan file (``MEMHONCHO_TEST_FORK_KILL_PLAN``), the
pool process claims the plan (deletes the file, so the redelivered task is not killed again)
and SIGKILLs itself: at once, or ``delay_s`` later while the next Honcho call is held by a
latency fault the plan adds to the stand-in, so it dies inside that request.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

from memhoncho.delivery import clone as fork_clone
from memhoncho.testing.standin_control import StandInControl

PLAN_ENV = "MEMHONCHO_TEST_FORK_KILL_PLAN"


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _observe(step: str) -> None:
    path = Path(os.environ[PLAN_ENV])
    try:
        plan = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    if plan.get("step") != step:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # another process claimed it
    fault = plan.get("fault")
    if fault is None:
        _kill_self()
        return
    StandInControl(os.environ["MEMHONCHO_BASE_URL"]).add_fault("latency_ms", **fault)
    threading.Timer(float(plan["delay_s"]), _kill_self).start()


if os.environ.get(PLAN_ENV):
    fork_clone.STEP_OBSERVERS.append(_observe)
