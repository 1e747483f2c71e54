"""Status and doctor know the deployment: workers on the broker that serve another data
directory or store are listed and reported (and no consumer of this one's queues), and a
relay that ``memhoncho capture``'s records wait for is reported missing."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memhoncho import cli
from memhoncho.cli import doctor
from memhoncho.deployment import Deployment, initialise, serves_another
from memhoncho.status.view import StatusReader
from memhoncho.status.workers import FINGERPRINT_KEY, WorkersReader
from memhoncho.store import hint_marks, relay_watch
from memhoncho.testing.config import write_settings
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, wait_until
from memhoncho.worker import routing

ALL_QUEUES = [*routing.deliver_queues(8), routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE]


def _reader(deployment: Deployment, confs: dict[str, Any]) -> StatusReader:
    reader = StatusReader(deployment)
    reader.workers = WorkersReader(ask_workers=lambda _: confs)
    return reader


# ---- what "another deployment" is ---------------------------------------------------------


def test_the_identity_decides_on_the_files_and_the_database_decides_on_postgresql() -> None:
    ours = {"data_dir": "/var/lib/memhoncho", "deployment_id": "a1", "store": "files"}
    elsewhere = {**ours, "data_dir": "/srv/memhoncho"}  # the same volume, mounted elsewhere
    assert serves_another(ours, elsewhere) is None
    other_volume = {**ours, "deployment_id": "b2"}  # another volume at the same path
    assert serves_another(ours, other_volume) == "data directory /var/lib/memhoncho (b2)"
    unidentified = {**ours, "deployment_id": None, "data_dir": "/typo"}
    assert serves_another(ours, unidentified) == "data directory /typo"
    assert serves_another(ours, {**ours, "store": "postgresql://db/m"}) == "store postgresql://db/m"
    database = {"data_dir": "/m1", "deployment_id": "a1", "store": "postgresql://db/m"}
    assert serves_another(database, {**database, "data_dir": "/m2", "deployment_id": "c3"}) is None
    assert serves_another(ours, None) is None  # an older worker publishes nothing


# ---- the status view, with the workers' answers given -------------------------------------


def test_status_lists_each_worker_and_reports_those_of_another_deployment(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    deployment = Deployment(config_dir, data_dir)
    theirs = tmp_path / "theirs"
    initialise(theirs)
    confs = {
        "ours@h": {FINGERPRINT_KEY: deployment.fingerprint()},
        "stranger@h": {FINGERPRINT_KEY: Deployment(config_dir, theirs).fingerprint()},
        "old@h": {},
    }
    view = _reader(deployment, confs).read()
    workers = view["workers"]
    assert (workers["answered"], workers["this_deployment"], workers["other_deployment"]) == (
        3,
        2,
        1,
    )
    by_name = {w["name"]: w for w in workers["seen"]}
    assert by_name["ours@h"]["this_deployment"] is True
    assert by_name["old@h"]["this_deployment"] is None
    stranger = by_name["stranger@h"]
    assert stranger["this_deployment"] is False
    assert stranger["data_dir"] == str(theirs.absolute())
    assert str(theirs.absolute()) in stranger["serves"]
    assert view["health"]["verdict"] != "healthy"
    assert any("stranger@h serves data directory" in r for r in view["health"]["reasons"])


def test_a_heartbeat_of_a_worker_of_another_deployment_is_no_consumer(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    from memhoncho.results.file_store import FileResults

    deployment = Deployment(config_dir, data_dir)
    initialise(tmp_path / "theirs")
    FileResults(data_dir).worker_heartbeat("stranger@h:42", time.time(), ALL_QUEUES)
    confs = {
        "stranger@h": {FINGERPRINT_KEY: Deployment(config_dir, tmp_path / "theirs").fingerprint()}
    }
    view = _reader(deployment, confs).read()
    assert view["tasks"]["live_workers"] == 0
    assert set(view["tasks"]["consumers"].values()) == {0}
    assert any("serve another deployment" in r for r in view["health"]["reasons"])
    alone = _reader(deployment, {}).read()  # without the census the heartbeat counted
    assert alone["tasks"]["live_workers"] == 1


def test_workers_that_cannot_be_asked_degrade_the_bucket_not_the_view(
    config_dir: Path, data_dir: Path
) -> None:
    def unreachable(_: Deployment) -> dict[str, Any]:
        raise ConnectionRefusedError

    reader = StatusReader(Deployment(config_dir, data_dir))
    reader.workers = WorkersReader(ask_workers=unreachable)
    view = reader.read()
    assert view["workers"]["state"] == "degraded"
    assert view["workers"]["reasons"] == ["workers could not be asked (ConnectionRefusedError)"]
    assert "workers" in view["degraded"]


def test_a_kept_reader_asks_the_workers_at_most_once_per_max_age(
    config_dir: Path, data_dir: Path
) -> None:
    asked: list[int] = []
    reader = WorkersReader(ask_workers=lambda _: asked.append(1) or {}, max_age_s=60.0)
    deployment = Deployment(config_dir, data_dir)
    reader.read(deployment)
    reader.read(deployment)
    assert len(asked) == 1
    fresh = WorkersReader(ask_workers=lambda _: asked.append(1) or {}, max_age_s=0.0)
    fresh.read(deployment)
    fresh.read(deployment)
    assert len(asked) == 3


# ---- the relay ----------------------------------------------------------------------------


def test_a_relay_is_missing_only_when_captures_wait_for_one(
    config_dir: Path, data_dir: Path
) -> None:
    deployment = Deployment(config_dir, data_dir)
    assert relay_watch.watch(deployment.layout).state == relay_watch.ABSENT
    assert doctor.check_relay(deployment).verdict == doctor.WARN
    view = _reader(deployment, {}).read()
    assert view["config"]["relay"] == "absent"
    assert not any("relay" in r for r in view["health"]["reasons"])

    hint_marks.request_relay(deployment.layout, "k1", "c1")  # what `memhoncho capture` leaves
    found = relay_watch.watch(deployment.layout)
    assert (found.state, found.waiting) == (relay_watch.MISSING, 1)
    check = doctor.check_relay(deployment)
    assert check.verdict == doctor.FAIL
    assert "1 conversation captured by `memhoncho capture` wait" in check.detail
    view = _reader(deployment, {}).read()
    assert (view["config"]["relay"], view["config"]["relay_waiting"]) == ("missing", 1)
    assert view["health"]["verdict"] != "healthy"
    assert any("no outbox relay is running" in r for r in view["health"]["reasons"])

    heartbeat = deployment.layout.relay_heartbeat("this-host")
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    heartbeat.touch()  # a relay runs: it takes the request at its next look
    assert relay_watch.watch(deployment.layout).state == relay_watch.RUNNING
    assert doctor.check_relay(deployment).verdict == doctor.PASS


# ---- a real worker of another data directory on the same broker ---------------------------


@pytest.mark.slow
def test_status_says_a_real_worker_on_the_broker_serves_another_data_directory(
    config_dir: Path,
    data_dir: Path,
    tmp_path: Path,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memhoncho.status.http import STATUS_PATH, StatusServer
    from memhoncho.testing.processes import serving

    write_settings(config_dir, broker_url=redis_url)
    theirs = tmp_path / "mistyped"
    initialise(theirs)
    env = memhoncho_env(config_dir=config_dir, data_dir=theirs, broker_url=redis_url)
    with CeleryProcess("worker", env, queues=ALL_QUEUES, name="stranger") as stranger:
        assert stranger.process is not None
        assert cli.main(["status", "--json", "--max-age", "0"]) == 0
        view = json.loads(capsys.readouterr().out)
        (seen,) = view["workers"]["seen"]
        assert seen["name"].startswith("stranger@") and seen["this_deployment"] is False
        assert seen["serves"].startswith(f"data directory {theirs.absolute()}")
        assert view["tasks"]["live_workers"] == 0  # its heartbeat is in the shared Redis
        assert view["health"]["verdict"] != "healthy"
        assert any("serve another deployment" in r for r in view["health"]["reasons"])

        assert cli.main(["status", "--max-age", "0"]) == 0
        text = capsys.readouterr().out
        assert "ANOTHER deployment: data directory" in text and "stranger@" in text

        token = "status-identity-token-0123456789"
        (config_dir / "secrets.json").write_text(json.dumps({"status-token": token}))
        deployment = Deployment(config_dir, data_dir)
        with serving(StatusServer(deployment, "127.0.0.1", 0)) as server:
            request = urllib.request.Request(server.url + STATUS_PATH)
            request.add_header("Authorization", f"Bearer {token}")
            with urllib.request.urlopen(request, timeout=10) as answer:
                served = json.loads(answer.read())
        assert served["workers"]["other_deployment"] == 1

        ours_env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, broker_url=redis_url)
        with CeleryProcess("worker", ours_env, queues=ALL_QUEUES, name="ours"):
            both = wait_until(
                lambda: (
                    (v := StatusReader(deployment, workers_max_age_s=0).read())
                    and v["workers"].get("answered") == 2
                    and v
                ),
                "both workers to answer",
            )
    verdicts = {w["name"].split("@")[0]: w["this_deployment"] for w in both["workers"]["seen"]}
    assert verdicts == {"stranger": False, "ours": True}
    assert both["tasks"]["live_workers"] == 1  # ours only
