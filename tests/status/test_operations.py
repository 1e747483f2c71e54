"""Operating memhoncho: doctor's verdicts, task events for Flower, beat heartbeats, real results."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memhoncho import cli
from memhoncho.cli import doctor
from memhoncho.deployment import Deployment
from memhoncho.testing.processes import CeleryProcess
from memhoncho.worker import routing

KEY = "sk-operations-test-key"
pytestmark = pytest.mark.standin(api_key=KEY)
WAIT_S = 60.0  # generous: only a hang fails


def _settings(config_dir: Path, **values: Any) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(values))


def _verdicts(checks: list[doctor.Check]) -> dict[str, str]:
    return {c.name: c.verdict for c in checks}


def test_doctor_fails_a_broken_setup_and_says_what_to_do(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _settings(config_dir, partitions=0)
    check, *rest = doctor.run_checks(Deployment(config_dir, data_dir))
    assert check.verdict == "fail" and "partitions" in check.detail and check.action
    assert {c.verdict for c in rest[1:]} == {"skip"}  # what reads the settings is skipped
    _settings(config_dir, broker_url="redis://127.0.0.1:1/0", base_url="http://127.0.0.1:1")
    checks = doctor.run_checks(Deployment(config_dir, data_dir))
    verdicts = _verdicts(checks)
    assert verdicts == {
        "settings": "pass",
        "api_key": "fail",
        "data_dir": "pass",
        "store": "pass",
        "relay": "warn",
        "broker": "fail",
        "workers": "fail",
        "beat": "fail",
        "stranded": "pass",
        "foreign_hints": "pass",
        "honcho": "fail",
    }
    assert all(c.action for c in checks if c.verdict != "pass")
    assert "start the broker (Redis)" in next(c.action for c in checks if c.name == "broker")
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  api_key" in out and "->" in out
    assert "WARN  relay " in out and "no outbox relay is running" in out


@pytest.fixture
def live(live_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    return live_env()


ALL_QUEUES = [*routing.deliver_queues(8), routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE]


@pytest.mark.slow
def test_doctor_passes_a_healthy_setup_and_counts_the_beats(
    config_dir: Path, data_dir: Path, live: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = Deployment(config_dir, data_dir)
    with CeleryProcess("worker", live, queues=ALL_QUEUES), CeleryProcess("beat", live):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and doctor.check_beat(deployment).verdict != "pass":
            time.sleep(0.2)  # the beat's first heartbeat
        assert cli.main(["doctor", "--json"]) == 0, capsys.readouterr().out
        answer = json.loads(capsys.readouterr().out)
        verdicts = {c["name"]: c["verdict"] for c in answer["checks"]}
        assert answer["ok"] is True
        assert verdicts.pop("relay") == "warn"  # no relay here: a warning, not a failure
        assert set(verdicts.values()) == {"pass"}
        with CeleryProcess("beat", live, name="second-beat"):
            while (
                time.monotonic() < deadline
                and "2 beats" not in doctor.check_beat(deployment).detail
            ):
                time.sleep(0.2)
            assert doctor.check_beat(deployment).verdict == "fail"
    assert doctor.check_workers(deployment, _app(deployment)).verdict == "fail"  # no worker now


def _app(deployment: Deployment) -> Any:
    from memhoncho.celery_app import create_app

    return create_app(deployment)


@pytest.mark.slow
def test_a_worker_sends_task_events_through_redis_for_flower(
    config_dir: Path, data_dir: Path, live: dict[str, str]
) -> None:
    app = _app(Deployment(config_dir, data_dir))
    seen: list[dict[str, Any]] = []
    listening = threading.Event()

    receivers: list[Any] = []

    def listen() -> None:
        with app.connection_for_read() as conn:
            receiver = app.events.Receiver(conn, handlers={"*": seen.append})
            receivers.append(receiver)
            listening.set()
            receiver.capture(limit=None, timeout=None, wakeup=False)  # until should_stop

    with CeleryProcess("worker", live, queues=[routing.MAINTENANCE_QUEUE]):
        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        assert listening.wait(WAIT_S)
        time.sleep(1.0)  # the receiver's fanout binding is in place before the task is sent
        result = app.send_task("memhoncho.outbox_sweep", queue=routing.MAINTENANCE_QUEUE)
        deadline = time.monotonic() + WAIT_S
        wanted = {"task-received", "task-started", "task-succeeded"}
        while time.monotonic() < deadline:
            mine = {e["type"] for e in list(seen) if e.get("uuid") == result.id}
            if wanted <= mine:
                break
            time.sleep(0.1)
        receivers[0].should_stop = True
        thread.join(WAIT_S)
    mine = {e["type"] for e in seen if e.get("uuid") == result.id}
    assert wanted <= mine
    received = next(e for e in seen if e["type"] == "task-received" and e["uuid"] == result.id)
    assert received["name"] == "memhoncho.outbox_sweep"
    app.close()
