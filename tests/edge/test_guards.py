"""Guards over the Celery app: every task named and routed, the deliver route a stable hash."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import memhoncho.worker.tasks  # noqa: F401  (registers every task on the app)
from memhoncho.celery_app import create_app
from memhoncho.deployment import Deployment, initialise
from memhoncho.worker import routing

#: (conversation id, partitions) -> partition, computed once with crc32: a change of hash
#: would move live conversations to another queue mid-stream and break their order
PINNED_PARTITIONS = {
    ("conv-1", 8): 4,
    ("ana-run", 8): 1,
    ("conv-000", 8): 4,
    ("é", 8): 6,
    ("conv-1", 256): 204,
    ("ana-run", 256): 201,
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The worker's app, built on an initialised data directory of its own (the process's
    ``celery_app.app`` refuses a folder that is not one, and would outlive the test)."""
    root = tmp_path_factory.mktemp("guards")
    initialise(root / "data")
    return create_app(Deployment(root / "config", root / "data"))


def memhoncho_tasks(app: Any) -> list[str]:
    return sorted(name for name in app.tasks if not name.startswith("celery."))


def declared_queues(app: Any) -> set[str]:
    return {queue.name for queue in app.conf.task_queues}


def test_every_registered_task_has_an_explicit_memhoncho_name_and_a_route(app: Any) -> None:
    names = memhoncho_tasks(app)
    assert "memhoncho.deliver" in names
    for name in names:
        assert name.startswith("memhoncho."), f"{name} has no explicit memhoncho. name"
        assert name in routing.TASK_QUEUES, f"{name} is missing from routing.TASK_QUEUES"


def test_every_task_routes_to_a_declared_queue(app: Any) -> None:
    partitions = sum(1 for q in declared_queues(app) if q.startswith(routing.DELIVER_QUEUE_PREFIX))
    assert declared_queues(app) >= set(routing.deliver_queues(partitions))
    router = routing.Router(partitions)
    queues = declared_queues(app)
    for name in memhoncho_tasks(app):
        route = router(name, ["conv-1"], {}, {})
        assert route is not None and route["queue"] in queues, f"{name} -> {route}"


def test_every_routed_name_is_a_registered_task(app: Any) -> None:
    unknown = set(routing.TASK_QUEUES) - set(memhoncho_tasks(app))
    assert not unknown, f"routed but never registered: {sorted(unknown)}"


def test_the_deliver_route_is_a_stable_crc32_of_the_conversation_id() -> None:
    for (conversation_id, partitions), expected in PINNED_PARTITIONS.items():
        assert routing.partition(conversation_id, partitions) == expected
    router = routing.Router(8)
    assert router("memhoncho.deliver", ["conv-1"], {}, {}) == {"queue": "memhoncho.deliver.4"}
    assert router("memhoncho.deliver", [], {"conversation_id": "ana-run"}, {}) == {
        "queue": "memhoncho.deliver.1"
    }


def test_the_deliver_route_is_the_same_in_a_fresh_interpreter() -> None:
    """Python's ``hash()`` is salted per process; the route must not be."""
    code = "from memhoncho.worker import routing; print(routing.deliver_queue('conv-1', 8))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    assert out.stdout.strip() == "memhoncho.deliver.4"


def test_every_beat_entry_names_a_registered_routed_task(app: Any) -> None:
    schedule = app.conf.beat_schedule
    assert schedule, "the app has no beat table"
    for entry_name, entry in schedule.items():
        task = entry["task"]
        if task not in app.tasks:
            pytest.skip(f"beat entry {entry_name} names {task}, not registered yet")
        assert task in routing.TASK_QUEUES
        assert entry["options"]["queue"] in declared_queues(app)
        assert 0 < entry["options"]["expires"] < entry["schedule"]
