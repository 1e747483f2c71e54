"""The beat table: every entry names a registered, routed task, expiring before its next firing."""

from __future__ import annotations

from pathlib import Path

from memhoncho.celery_app import beat_schedule, create_app
from memhoncho.deployment import Deployment
from memhoncho.settings import Settings
from memhoncho.worker import routing


def test_the_beat_table_names_registered_tasks_with_expiry_under_the_period(
    config_dir: Path, data_dir: Path
) -> None:
    import memhoncho.worker.tasks  # noqa: F401  (registers the tasks)

    app = create_app(Deployment(config_dir, data_dir))  # an initialised folder of its own

    table = beat_schedule(Settings(sweep_interval_s=30, refresh_interval_s=20))
    assert set(table) == {"outbox-sweep", "representation-refresh"}
    assert table["outbox-sweep"]["task"] == "memhoncho.outbox_sweep"
    assert table["representation-refresh"]["task"] == "memhoncho.refresh_representations"
    for entry in table.values():
        assert entry["task"] in app.tasks
        assert entry["task"] in routing.TASK_QUEUES
        assert 0 < entry["options"]["expires"] < entry["schedule"]
        assert entry["options"]["queue"] == routing.MAINTENANCE_QUEUE
    assert table["outbox-sweep"]["schedule"] == 30
    assert "memhoncho.refresh_representation" in app.tasks
