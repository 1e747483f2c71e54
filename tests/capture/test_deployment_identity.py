"""A deployment that knows itself: the data directory's identity, ``Host()`` initialising its
own folder, a capture's ``hint`` saying what became of its delivery hint, and doctor finding
workers that serve another deployment."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memhoncho.capture.host import Host
from memhoncho.cli import doctor
from memhoncho.deployment import (
    IDENTITY_FILE,
    Deployment,
    identity,
    initialise,
    require_initialised,
)
from memhoncho.errors import NotInitialised
from memhoncho.models import HintOutcome
from memhoncho.testing.config import write_api_key
from memhoncho.testing.runs import run_event


def test_host_told_to_initialise_does_it_once_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "fresh"
    with (
        caplog.at_level(logging.INFO, logger="memhoncho.deployment"),
        Host(tmp_path / "config", data, init=True),
    ):
        pass
    found = identity(data)
    assert found is not None and found["data_dir"] == str(data.absolute())
    assert [r.getMessage() for r in caplog.records] == ["data directory initialised"]
    caplog.clear()
    with (
        caplog.at_level(logging.INFO, logger="memhoncho.deployment"),
        Host(tmp_path / "config", data),
    ):
        pass
    assert caplog.records == []
    assert identity(data) == found  # never rewritten


def test_host_creates_the_default_data_directory_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEMHONCHO_DATA_DIR", raising=False)
    with Host(tmp_path / "config") as host:
        assert host.deployment.data_dir == tmp_path / "home" / ".local" / "share" / "memhoncho"
    assert identity(tmp_path / "home" / ".local" / "share" / "memhoncho") is not None


@pytest.mark.parametrize("spelling", ["plain", "tilde", "through-a-link", "trailing-slash"])
def test_the_default_location_named_explicitly_is_created_on_first_use_as_when_unnamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """A desktop client's settings name the default folder in full (docs/mcp.md), or with a
    ``~`` no shell expands, or through a link to the home folder: each is the default."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "link").symlink_to(home)
    monkeypatch.setenv("HOME", str(home))
    named = {
        "plain": str(home / ".local/share/memhoncho"),
        "tilde": "~/.local/share/memhoncho",
        "through-a-link": str(tmp_path / "link" / ".local/share/memhoncho"),
        "trailing-slash": str(home / ".local/share/memhoncho") + "/",
    }[spelling]
    monkeypatch.setenv("MEMHONCHO_DATA_DIR", named)
    with Host(tmp_path / "config"):
        pass
    assert identity(home / ".local" / "share" / "memhoncho") is not None
    assert not (Path.cwd() / "~").exists()


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_host_refuses_a_named_folder_never_initialised_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    typo = tmp_path / "typo"
    if how == "variable":
        monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(typo))
    with pytest.raises(NotInitialised) as refused:
        Host(tmp_path / "config", typo if how == "argument" else None)
    assert refused.value.code == "ERR_NOT_INITIALISED"
    assert "init=True" in refused.value.message
    assert not typo.exists()


def test_a_host_told_not_to_initialise_refuses_a_folder_and_creates_nothing(
    tmp_path: Path,
) -> None:
    for told in ({"init": False}, {"initialise": False}):  # the old keyword still works
        with pytest.raises(NotInitialised) as refused:
            Host(tmp_path / "config", tmp_path / "typo", **told)  # type: ignore[arg-type]
        assert "memhoncho init" in refused.value.message
        assert not (tmp_path / "typo").exists()


def test_two_initialisations_at_once_agree_on_one_identity(tmp_path: Path) -> None:
    first, written = initialise(tmp_path / "d")
    again, written_again = initialise(tmp_path / "d")
    assert written and not written_again and again == first
    assert [p.name for p in (tmp_path / "d").iterdir()] == [IDENTITY_FILE]  # no temp left


def test_a_data_directory_from_before_identities_is_adopted(tmp_path: Path) -> None:
    (tmp_path / "old" / "data" / "outbox").mkdir(parents=True)
    found = require_initialised(tmp_path / "old")
    assert identity(tmp_path / "old") == found


def test_the_hint_says_what_happened(config_dir: Path, data_dir: Path) -> None:
    with Host(config_dir, data_dir, hints=False) as host:
        assert host.capture(run_event("c1", 0)).hint is HintOutcome.NO_KEY
        write_api_key(config_dir, "sk-hint")
        assert host.capture(run_event("c1", 1)).hint is HintOutcome.RELAY
        assert host.capture(run_event("c1", 2)).hint is HintOutcome.WAITING  # one request waits
        duplicate = host.capture(run_event("c1", 2))
        assert (duplicate.status, duplicate.hint) == ("duplicate", HintOutcome.NONE)


def test_a_published_hint_says_so(
    config_dir: Path, data_dir: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    write_api_key(config_dir, "sk-hint")
    with Host(config_dir, data_dir) as host:
        result = host.capture(run_event("c1", 0))
        assert (result.enqueued, result.hint) == (True, HintOutcome.PUBLISHED)
        result = host.capture(run_event("c1", 1))  # the first hint still waits for a worker
        assert (result.enqueued, result.hint) == (True, HintOutcome.WAITING)


def test_a_broker_that_is_down_says_so(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", "redis://127.0.0.1:1/0")  # nothing listens
    write_api_key(config_dir, "sk-hint")
    with Host(config_dir, data_dir) as host:
        result = host.capture(run_event("c1", 0))
    assert (result.status, result.enqueued, result.hint) == (
        "captured",
        False,
        HintOutcome.BROKER_DOWN,
    )


def test_doctor_names_a_worker_of_another_data_directory_or_store(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    ours = Deployment(config_dir, data_dir)
    mine = {"memhoncho_deployment": ours.fingerprint()}
    assert doctor._serves(ours, mine) is None
    elsewhere = Deployment(config_dir, tmp_path / "elsewhere").fingerprint()
    assert "data directory" in str(doctor._serves(ours, {"memhoncho_deployment": elsewhere}))
    pg = {**ours.fingerprint(), "store": "postgresql://db/memhoncho"}
    assert doctor._serves(ours, {"memhoncho_deployment": pg}) == "store postgresql://db/memhoncho"
    assert doctor._serves(ours, {}) is None  # an older worker: nothing to compare


def test_a_fingerprint_never_shows_the_store_password(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_STORE_URL", "postgresql://u:s3cret@db:5432/memhoncho")
    printed = Deployment(config_dir, data_dir).fingerprint()
    assert printed["store"] == "postgresql://db:5432/memhoncho"
    assert identity(data_dir) is not None
    assert printed["deployment_id"] == identity(data_dir)["deployment_id"]  # type: ignore[index]


@pytest.mark.slow
def test_doctor_fails_a_real_worker_on_the_same_broker_serving_another_data_directory(
    config_dir: Path, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memhoncho.testing.processes import CeleryProcess, memhoncho_env
    from memhoncho.worker import routing

    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    ours = Deployment(config_dir, tmp_path / "ours")
    initialise(ours.data_dir)
    theirs = tmp_path / "mistyped"
    initialise(theirs)
    env = memhoncho_env(config_dir=config_dir, data_dir=theirs, broker_url=redis_url)
    queues = [*routing.deliver_queues(8), routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE]
    app = doctor._app(ours)
    try:
        with CeleryProcess("worker", env, queues=queues):
            check = doctor.check_workers(ours, app)
    finally:
        app.close()
    assert check.verdict == "fail"
    assert f"serves data directory {theirs.absolute()}" in check.detail
    assert "another deployment" in check.detail and check.action
