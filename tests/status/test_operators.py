"""Operating memhoncho with real processes: `run` on the folders it was given, doctor and the
health verdict against real workers, worker log lines with their fields, Flower's API."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.cli import doctor
from memhoncho.deployment import Deployment
from memhoncho.status.view import status_view
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, wait_until
from memhoncho.testing.runs import answered_run
from memhoncho.worker import routing

KEY = "sk-operators-test-key"
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]
ALL_QUEUES = [*routing.deliver_queues(8), routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE]


@pytest.fixture
def live(live_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    # a failed send is fenced (4 x 1 + 0.5 s) before its reconcile: failures come in seconds
    return live_env(honcho_timeout_s=1.0, send_settle_s=0.5)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # stray children
    except (ProcessLookupError, PermissionError):
        pass


def test_run_delivers_from_the_folders_it_was_given_not_the_environment_defaults(
    tmp_path: Path, redis_url: str, standin: HonchoStandIn, workspace_id: str
) -> None:
    config, data = tmp_path / "given-config", tmp_path / "given-data"
    point_at_standin(config, standin, workspace_id, KEY, broker_url=redis_url)
    decoys = tmp_path / "decoy-config", tmp_path / "decoy-data"  # what the environment says
    env = memhoncho_env(config_dir=decoys[0], data_dir=decoys[1], api_key=None)
    log = tempfile.NamedTemporaryFile(prefix="memhoncho-run-", suffix=".log", delete=False)  # noqa: SIM115
    args = [sys.executable, "-m", "memhoncho", "run", "--concurrency", "1"]
    args += ["--config-dir", str(config), "--data-dir", str(data)]  # after the subcommand
    process = subprocess.Popen(
        args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    conversation = "run-dirs-c1"
    session = ids.session_id(workspace_id, conversation)
    # the worker's own log lines carry their structured fields
    delivered = f"action=batch_delivered conversation_key={ids.conversation_key(conversation)}"
    try:
        wait_until(lambda: "ready." in Path(log.name).read_text(errors="replace"), "the worker")
        with Host(config, data) as host:
            assert host.capture(answered_run(conversation, "r1")).enqueued
        wait_until(lambda: len(standin.messages(workspace_id, session)) == 2, "the delivery")
        # the stand-in holds the turns before the worker records and logs them: wait for the log
        # line too, else the stop below can kill the pool child in between (seen on CI)
        wait_until(lambda: delivered in Path(log.name).read_text(errors="replace"), "the log")
    finally:
        _stop_group(process)
        log.close()
    text = Path(log.name).read_text(errors="replace")
    assert [m["content"] for m in standin.messages(workspace_id, session)] == [
        "user text of r1",
        "answer r1",
    ]
    assert (data / "celerybeat-schedule").exists() or any(data.glob("celerybeat-schedule*"))
    assert not decoys[1].exists() or not any(decoys[1].rglob("*.jsonl"))
    assert delivered in text, text[-3000:]
    assert KEY not in text and "user text of r1" not in text


def test_doctor_fails_and_health_degrades_when_no_worker_consumes_maintenance_or_recall(
    config_dir: Path, data_dir: Path, live: dict[str, str]
) -> None:
    deployment = Deployment(config_dir, data_dir)
    with CeleryProcess("worker", live, queues=routing.deliver_queues(8)):
        check = wait_until(
            lambda: (
                (c := doctor.run_checks(deployment)) and next(x for x in c if x.name == "workers")
            ),
            "doctor",
        )
        assert check.verdict == "fail"
        assert "no worker consumes memhoncho.recall, memhoncho.maintenance" in check.detail
        view = wait_until(
            lambda: (v := status_view(deployment)) and v["tasks"].get("live_workers") and v,
            "the worker's heartbeat",
        )
        assert view["tasks"]["consumers"]["memhoncho.deliver.0"] == 1
        assert view["tasks"]["consumers"]["memhoncho.maintenance"] == 0
        assert (
            "no live worker consumes memhoncho.recall, memhoncho.maintenance"
            in view["health"]["reasons"]
        )
    gone = wait_until(
        lambda: (v := status_view(deployment)) and v["tasks"]["live_workers"] == 0 and v,
        "the worker's heartbeat to go with it",
    )
    assert gone["tasks"]["consumers"]["memhoncho.deliver.0"] == 0


def test_health_turns_failing_with_a_failing_honcho_and_back_to_healthy(
    config_dir: Path,
    data_dir: Path,
    live: dict[str, str],
    standin: HonchoStandIn,
    workspace_id: str,
) -> None:
    from memhoncho.status.render import prometheus

    deployment = Deployment(config_dir, data_dir)
    conversation = "health-c1"
    standin.faults.add("http_503", count=None, path_contains="/messages", method="POST")
    worker = CeleryProcess("worker", live, queues=ALL_QUEUES)
    with worker, CeleryProcess("beat", live), Host(config_dir, data_dir) as host:
        wait_until(
            lambda: (v := status_view(deployment))["health"]["verdict"] == "healthy" and v,
            "a healthy start (a beat, every queue consumed, nothing pending)",
        )
        assert host.capture(answered_run(conversation, "r1")).enqueued
        # Two findings turn it failing, the task's streak and the parked conversation, each
        # after its third failure: which is read first is a race, so wait for the task's.
        failing = wait_until(
            lambda: (
                (v := status_view(deployment))["health"]["verdict"] == "failing"
                and any(r.startswith("memhoncho.deliver failed ") for r in v["health"]["reasons"])
                and v
            ),
            "the verdict to turn failing on the delivery task's failures",
        )
        reasons = failing["health"]["reasons"]
        task_reason = next(r for r in reasons if r.startswith("memhoncho.deliver failed "))
        assert "ERR_HONCHO_UNAVAILABLE" in task_reason
        assert failing["sources"] == "ok"  # every source read: the verdict is about delivery
        metrics = prometheus(failing)
        assert 'memhoncho_health{verdict="failing"} 1.0' in metrics
        assert 'memhoncho_health{verdict="healthy"} 0.0' in metrics

        standin.faults.clear()
        host.enqueue_delivery(conversation)
        healthy = wait_until(
            lambda: (v := status_view(deployment))["health"]["verdict"] == "healthy" and v,
            "the verdict to come back to healthy",
        )
    assert healthy["health"]["reasons"] == []
    assert healthy["outbox"]["oldest_pending_age_s"] == 0
    assert len(standin.messages(workspace_id, ids.session_id(workspace_id, conversation))) == 2
    text = worker.log_text()
    key = ids.conversation_key(conversation)
    assert (
        f"delivery failed action=delivery_failed conversation_key={key}"
        " code=ERR_HONCHO_UNAVAILABLE" in text
    ), text[-3000:]
    assert KEY not in text and "user text of r1" not in text


FLOWER_AUTH = "ops:flower-test-password"


def _flower_get(url: str) -> Any:
    request = urllib.request.Request(url)
    token = base64.b64encode(FLOWER_AUTH.encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, ValueError):
        return None


def test_flower_from_the_default_install_lists_the_worker_and_memhoncho_tasks(
    config_dir: Path,
    data_dir: Path,
    live: dict[str, str],
    standin: HonchoStandIn,
    workspace_id: str,
) -> None:
    port = free_port()
    flower = CeleryProcess(
        "flower",
        live,
        extra_args=[f"--port={port}", "--address=127.0.0.1", f"--basic-auth={FLOWER_AUTH}"],
    )
    url = f"http://127.0.0.1:{port}"
    worker = CeleryProcess("worker", live, queues=ALL_QUEUES, name="flower-seen")
    with worker:
        flower.start(wait=False)  # Flower prints no "ready" line; its API answering is ready
        try:
            wait_until(lambda: _flower_get(f"{url}/api/workers?refresh=1"), "Flower's API", 60)
            workers = wait_until(
                lambda: (
                    (w := _flower_get(f"{url}/api/workers?refresh=1"))
                    and any(name.startswith("flower-seen@") for name in w)
                    and w
                ),
                "Flower to list the worker",
            )
            name = next(n for n in workers if n.startswith("flower-seen@"))
            consumed = {q["name"] for q in workers[name].get("active_queues") or []}
            assert routing.MAINTENANCE_QUEUE in consumed
            with Host(config_dir, data_dir) as host:
                assert host.capture(answered_run("flower-c1", "r1")).enqueued
            tasks = wait_until(
                lambda: (
                    (t := _flower_get(f"{url}/api/tasks"))
                    and any(
                        task.get("name") == "memhoncho.deliver" and task.get("state") == "SUCCESS"
                        for task in t.values()
                    )
                    and t
                ),
                "Flower to list the delivery task",
            )
        finally:
            flower.stop()
    delivered = [t for t in tasks.values() if t.get("name") == "memhoncho.deliver"]
    assert delivered and all(t.get("worker", "").startswith("flower-seen@") for t in delivered)
    session = ids.session_id(workspace_id, "flower-c1")
    assert len(standin.messages(workspace_id, session)) == 2


def test_a_worker_with_log_format_json_writes_its_fields_as_json_lines(
    config_dir: Path,
    data_dir: Path,
    live: dict[str, str],
    standin: HonchoStandIn,
    workspace_id: str,
) -> None:
    env = {**live, "MEMHONCHO_LOG_FORMAT": "json"}
    conversation = "json-logs-c1"
    session = ids.session_id(workspace_id, conversation)
    worker = CeleryProcess("worker", env, queues=ALL_QUEUES)
    with worker, Host(config_dir, data_dir) as host:
        assert host.capture(answered_run(conversation, "r1")).enqueued
        wait_until(lambda: len(standin.messages(workspace_id, session)) == 2, "the delivery")
        wait_until(lambda: "batch_delivered" in worker.log_text(), "the delivery's log line")
    lines = [json.loads(line) for line in worker.log_text().splitlines() if line.startswith("{")]
    delivered = [line for line in lines if line.get("action") == "batch_delivered"]
    assert delivered, worker.log_text()[-3000:]
    assert delivered[0]["conversation_key"] == ids.conversation_key(conversation)
    assert delivered[0]["logger"].startswith("memhoncho.") and delivered[0]["level"] == "INFO"
    assert any(line["logger"].startswith("celery") for line in lines)  # Celery's lines too
