"""Celery's monitors (``flower``, ``events``, ``inspect``, ``status``) read only the broker: on a
server broker they start without an initialised data directory and write nothing there; a
worker on the same folder is still refused, and so is a monitor on the embedded broker, whose
queues live in the data directory."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import memhoncho_env, terminate, wait_until
from memhoncho.worker.app import celery_command


def _env(tmp_path: Path, broker_url: str | None) -> dict[str, str]:
    (tmp_path / "config").mkdir(exist_ok=True)
    return memhoncho_env(
        config_dir=tmp_path / "config",
        data_dir=tmp_path / "never-initialised",
        broker_url=broker_url,
    )


def _celery(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_flower_serves_on_a_server_broker_without_an_initialised_data_directory(
    tmp_path: Path, redis_url: str
) -> None:
    env = _env(tmp_path, redis_url)
    port = free_port()
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", "flower"]
        + [f"--port={port}", "--address=127.0.0.1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def answers() -> bool:
            assert flower.poll() is None, flower.stderr.read() if flower.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=2):
                    return True
            except OSError:
                return False

        wait_until(answers, "flower's page", timeout_s=60)
    finally:
        terminate(flower)
    assert not (tmp_path / "never-initialised").exists()


def test_inspect_and_status_run_but_a_worker_is_refused_on_the_same_folder(
    tmp_path: Path, redis_url: str
) -> None:
    env = _env(tmp_path, redis_url)
    for argv in (["inspect", "ping", "--timeout", "0.5"], ["status", "--timeout", "0.5"]):
        done = _celery(env, *argv)
        assert "ERR_NOT_INITIALISED" not in done.stderr, argv
        assert "No nodes replied" in done.stdout + done.stderr, (argv, done.stderr)
    worker = _celery(env, "worker", "--pool", "solo")
    assert worker.returncode == 2 and "ERR_NOT_INITIALISED" in worker.stderr
    assert not (tmp_path / "never-initialised").exists()


def test_a_monitor_on_the_embedded_broker_is_refused_as_a_worker_is(tmp_path: Path) -> None:
    done = _celery(_env(tmp_path, None), "inspect", "ping", "--timeout", "0.5")
    assert done.returncode == 2 and "ERR_NOT_INITIALISED" in done.stderr
    assert not (tmp_path / "never-initialised").exists()


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["-A", "memhoncho.celery_app", "flower", "--port=5555"], "flower"),
        (["--app", "x", "-b", "redis://h", "events", "--dump"], "events"),
        (["-A", "memhoncho.celery_app", "worker", "-Q", "status"], "worker"),
        (["--loglevel=INFO"], None),
    ],
)
def test_the_celery_command_is_read_past_the_options_before_it(
    argv: list[str], command: str | None
) -> None:
    assert celery_command(argv) == command
