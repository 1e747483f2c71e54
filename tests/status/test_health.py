"""The health verdict, oldest-pending age, unreadable settings files, and the doctor on them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from memhoncho import cli, ids, settings
from memhoncho.cli import doctor
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.results import ErrorSummary
from memhoncho.results.file_store import FileResults
from memhoncho.status import health, render
from memhoncho.status.view import status_view
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_api_key
from memhoncho.worker import routing

SECRET = "sk-health-SECRET-value"


def _settings_file(config_dir: Path) -> Path:
    path = config_dir / settings.SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _healthy_view(**changes: Any) -> dict[str, Any]:
    """A view as a fully consumed, beating, delivering deployment answers it."""
    current = settings.Settings()
    view: dict[str, Any] = {
        "config": {"state": "ok", "configured": True},
        "outbox": {"state": "ok", "pending_batches": 0, "oldest_pending_age_s": 0.0},
        "queues": {
            "state": "ok",
            "depths": dict.fromkeys(routing.all_queues(current.partitions), 0),
        },
        "tasks": {
            "state": "ok",
            "tasks": {"memhoncho.deliver": {"consecutive_failures": 0}},
            "live_beats": 1,
            "live_workers": 1,
            "consumers": dict.fromkeys(routing.all_queues(current.partitions), 1),
        },
        "degraded": [],
    }
    for path, value in changes.items():
        bucket, _, name = path.partition("__")
        view[bucket][name] = value
    return view


def _verdict(view: dict[str, Any]) -> dict[str, Any]:
    return health.verdict(view, settings.Settings())


def test_a_consumed_beating_deployment_with_nothing_failing_is_healthy() -> None:
    assert _verdict(_healthy_view()) == {"verdict": "healthy", "reasons": []}


def test_three_failures_in_a_row_make_it_failing_with_the_error_code() -> None:
    failing = {"consecutive_failures": 3, "last_error_code": "ERR_HONCHO_UNAVAILABLE"}
    found = _verdict(_healthy_view(tasks__tasks={"memhoncho.deliver": failing}))
    assert found["verdict"] == "failing"
    assert found["reasons"] == [
        "memhoncho.deliver failed 3 times in a row (last: ERR_HONCHO_UNAVAILABLE)"
    ]
    one_retry = {"consecutive_failures": 1, "last_error_code": "ERR_HONCHO_UNAVAILABLE"}
    assert _verdict(_healthy_view(tasks__tasks={"memhoncho.deliver": one_retry}))["verdict"] == (
        "healthy"
    )


def test_pending_older_than_two_sweeps_is_stalled() -> None:
    old = 2 * settings.Settings().sweep_interval_s + 1
    found = _verdict(_healthy_view(outbox__oldest_pending_age_s=old, outbox__pending_batches=1))
    assert found["verdict"] == "stalled" and "oldest pending record" in found["reasons"][0]


def test_a_queue_nobody_consumes_is_stalled_when_messages_wait_and_degraded_when_not() -> None:
    current = settings.Settings()
    consumers = dict.fromkeys(routing.all_queues(current.partitions), 1)
    consumers["memhoncho.maintenance"] = 0
    idle = _verdict(_healthy_view(tasks__consumers=consumers))
    assert idle == {
        "verdict": "degraded",
        "reasons": ["no live worker consumes memhoncho.maintenance"],
    }
    depths = dict.fromkeys(routing.all_queues(current.partitions), 0)
    depths["memhoncho.maintenance"] = 4
    waiting = _verdict(_healthy_view(tasks__consumers=consumers, queues__depths=depths))
    assert waiting["verdict"] == "stalled"
    assert waiting["reasons"] == [
        "4 message(s) wait in memhoncho.maintenance and no live worker consumes it"
    ]


def test_no_beat_two_beats_no_key_or_an_unread_source_are_degraded() -> None:
    assert _verdict(_healthy_view(tasks__live_beats=0))["verdict"] == "degraded"
    assert "2 beats" in _verdict(_healthy_view(tasks__live_beats=2))["reasons"][0]
    assert _verdict(_healthy_view(config__configured=False))["verdict"] == "degraded"
    unread = _healthy_view()
    unread["degraded"] = ["queues"]
    assert _verdict(unread)["reasons"] == ["could not read: queues"]


def test_the_worst_finding_wins_and_comes_first() -> None:
    failing = {"consecutive_failures": 5, "last_error_code": "ERR_HONCHO_REJECTED"}
    found = _verdict(
        _healthy_view(tasks__live_beats=0, tasks__tasks={"memhoncho.deliver": failing})
    )
    assert found["verdict"] == "failing"
    assert found["reasons"][0].startswith("memhoncho.deliver failed 5 times")
    assert "no beat" in found["reasons"][1]


def test_the_view_puts_the_verdict_first_and_names_the_read_state_sources(
    config_dir: Path, data_dir: Path
) -> None:
    view = status_view(Deployment(config_dir, data_dir))
    assert next(iter(view)) == "health"
    assert view["health"]["verdict"] == "degraded"  # no key, no beat, no worker here
    assert "no beat is running: the sweep and refreshes never fire" in view["health"]["reasons"]
    assert "state" not in view
    assert view["degraded"] == ["queues"]  # the embedded broker's folder does not exist yet
    assert view["sources"] == "degraded"


def test_worker_heartbeats_give_the_consumers_of_each_queue(
    config_dir: Path, data_dir: Path
) -> None:
    results = FileResults(data_dir)
    now = time.time()
    results.worker_heartbeat("w1@host:1", now, ["memhoncho.deliver.0", "memhoncho.maintenance"])
    results.worker_heartbeat("w2@host:2", now - 3600, ["memhoncho.recall"])  # long gone
    results.record_failure("memhoncho.deliver", now, ErrorSummary.of(RuntimeError("x")), retry=True)
    tasks = status_view(Deployment(config_dir, data_dir))["tasks"]
    assert tasks["live_workers"] == 1
    assert tasks["consumers"]["memhoncho.deliver.0"] == 1
    assert tasks["consumers"]["memhoncho.maintenance"] == 1
    assert tasks["consumers"]["memhoncho.recall"] == 0
    results.worker_gone("w1@host:1")
    assert status_view(Deployment(config_dir, data_dir))["tasks"]["live_workers"] == 0


# ---- oldest pending age -------------------------------------------------------------------


def _capture_record(conversation: str, captured_at: float) -> dict[str, Any]:
    return {
        "batch_id": f"b-{conversation}",
        "conversation_id": conversation,
        "owner": "ana",
        "user_peer_id": ids.peer_id("ana"),
        "run_id": "r1",
        "captured_at": captured_at,
        "messages": [{"id": "m0", "role": "user", "entry_id": 0, "text": "hi", "meta": {}}],
    }


def test_oldest_pending_age_is_zero_with_nothing_pending_and_unknown_when_unreadable(
    config_dir: Path, data_dir: Path
) -> None:
    deployment = Deployment(config_dir, data_dir)
    assert status_view(deployment)["outbox"]["oldest_pending_age_s"] == 0
    key = ids.conversation_key("c-age")
    Outbox(deployment.layout).append(
        key,
        _capture_record("c-age", time.time() - 30),
        max_pending=10,
        delivered_seq=lambda: 0,
        delivered_before=lambda b: False,
    )
    assert status_view(deployment)["outbox"]["oldest_pending_age_s"] >= 29
    outbox_file = next(deployment.layout.root.rglob(f"{key}.jsonl"))
    outbox_file.unlink()
    outbox_file.mkdir()  # an outbox that cannot be read (even by root): pending is not known
    outbox = status_view(deployment)["outbox"]
    assert outbox["state"] == "degraded" and outbox["oldest_pending_age_s"] is None
    assert "unknown" in render.table({"outbox": outbox})


# ---- settings files that cannot be read ---------------------------------------------------


def test_a_settings_file_that_is_not_json_is_a_problem_naming_the_file_and_reason(
    config_dir: Path,
) -> None:
    path = _settings_file(config_dir)
    path.write_text('{"base_url": "http://honcho:8000",')
    with pytest.raises(ConfigError):  # nothing runs under a file that was not read
        settings.load(config_dir)
    (problem,) = settings.problems(config_dir)
    assert str(path) in problem and "is not valid JSON" in problem and "line 1" in problem
    path.write_text('{"base_url": "http://honcho:8000"}')
    assert settings.problems(config_dir) == []
    assert settings.load(config_dir).base_url == "http://honcho:8000"


def test_a_secrets_file_holding_a_list_is_a_problem_that_shows_none_of_its_content(
    config_dir: Path,
) -> None:
    (config_dir / settings.SECRETS_FILE).write_text(json.dumps([{"api-key": SECRET}]))
    (problem,) = settings.problems(config_dir)
    assert "secrets.json is not a JSON object (it holds a JSON list)" in problem
    assert SECRET not in problem
    assert settings.api_key(config_dir) is None


def test_doctor_fails_an_unreadable_settings_file_and_status_degrades_config(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _settings_file(config_dir).write_text("not json at all")
    write_api_key(config_dir, SECRET)
    deployment = Deployment(config_dir, data_dir)
    check = doctor.check_settings(deployment)
    assert check.verdict == "fail"
    assert "memhoncho.json is not valid JSON" in check.detail and check.action
    checks = {c.name: c.verdict for c in doctor.run_checks(deployment)}
    assert checks == {  # diagnosed: what reads no setting still runs, the rest is skipped
        "settings": "fail",
        "data_dir": "pass",
        **{name: "skip" for name in doctor.NEEDS_SETTINGS},
    }
    view = status_view(deployment)
    assert "config" in view["degraded"]
    assert "memhoncho.json is not valid JSON" in view["reasons"][0]
    assert view["health"]["verdict"] == "degraded"
    _settings_file(config_dir).unlink()
    (config_dir / settings.SECRETS_FILE).write_text(json.dumps(["a list", SECRET]))
    assert cli.main(["doctor", "--json"]) == 1  # a finding: doctor diagnoses, never refuses
    captured = capsys.readouterr()
    found = {c["name"]: c for c in json.loads(captured.out)["checks"]}
    assert found["settings"]["verdict"] == "fail"
    assert "secrets.json is not a JSON object" in found["settings"]["detail"]
    assert SECRET not in captured.out + captured.err
