"""The delivery task as a worker runs it (eagerly here): its arguments across versions."""

from __future__ import annotations

import memhoncho.tasks  # noqa: F401  (its shared tasks bind to the app built below)
from memhoncho import routing
from memhoncho.celery_app import create_app
from memhoncho.deployment import Deployment


def test_a_retry_queued_by_an_earlier_version_with_its_failure_counters_still_runs(
    deployment: Deployment,
) -> None:
    # Earlier versions carried ``failures`` and ``held`` in the retry's kwargs; the ledger
    # counts the failures now, and a message already queued must not fail on its arguments.
    app = create_app(deployment)
    deliver = app.tasks[routing.DELIVER_TASK]

    result = deliver.apply(args=["conv-1"], kwargs={"failures": 3, "held": 5})

    assert result.successful(), result.traceback
    assert result.get() == {"state": "idle", "messages": 0, "calls": 0}
    app.close()
