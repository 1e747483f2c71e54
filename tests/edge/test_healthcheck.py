"""The container healthchecks compose.yaml runs, the secret files it mounts, its example host."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memhoncho import cli, results, settings
from memhoncho.capture import relay
from memhoncho.capture.example_host import main as example_host
from memhoncho.deployment import Deployment
from memhoncho.status.http import StatusServer, status_token
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import serving
from memhoncho.testing.runs import answered_run

TOKEN = "status-token-from-a-file"


def failing_healthcheck(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str], which: str, says: str
) -> list[str]:
    """The argv of ``healthcheck <which>``, once it has failed saying ``says``: the host starts
    with no heartbeat of its own."""
    argv = ["--config-dir", str(config_dir), "--data-dir", str(data_dir), "healthcheck", which]
    assert cli.main(argv) == 1
    assert says in capsys.readouterr().out
    return argv


def test_the_beat_healthcheck_fails_without_a_heartbeat_from_this_host(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = failing_healthcheck(config_dir, data_dir, capsys, "beat", says="no beat on this host")
    store = results.store_for(None, data_dir)
    store.beat_heartbeat("elsewhere:1", time.time())  # another host's beat is not ours
    assert cli.main(argv) == 1
    store.beat_heartbeat(f"{socket.gethostname()}:{os.getpid()}", time.time())
    assert cli.main(argv) == 0
    store.beat_heartbeat(
        f"{socket.gethostname()}:{os.getpid()}", time.time() - results.BEAT_STALE_S - 1
    )
    assert cli.main(argv) == 1  # a stale heartbeat is a beat that is gone


def test_the_relay_healthcheck_passes_only_while_this_hosts_relay_touches_its_heartbeat(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = failing_healthcheck(
        config_dir, data_dir, capsys, "relay", says="no outbox relay on this host"
    )
    deployment = Deployment(config_dir, data_dir)
    looks = iter([False, True])
    relay.run(deployment, lambda conversation: True, should_stop=lambda: next(looks))
    assert cli.main(argv) == 0
    heartbeat = deployment.layout.relay_heartbeat(socket.gethostname())
    stale = time.time() - relay.HEARTBEAT_STALE_S - 1
    os.utime(heartbeat, (stale, stale))
    assert cli.main(argv) == 1  # a silent relay is a relay that is gone
    assert "silent" in capsys.readouterr().out


@pytest.fixture
def token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "run-secrets" / "status_token"
    path.parent.mkdir()
    path.write_text(TOKEN + "\n")
    monkeypatch.setenv("MEMHONCHO_STATUS_TOKEN_FILE", str(path))
    return path


@pytest.fixture
def server(config_dir: Path, data_dir: Path, token_file: Path) -> Iterator[StatusServer]:
    with serving(StatusServer(Deployment(config_dir, data_dir), "127.0.0.1", 0)) as running:
        yield running


def test_the_status_healthcheck_passes_only_while_the_server_answers_the_token(
    config_dir: Path, data_dir: Path, server: StatusServer, token_file: Path
) -> None:
    port = server.server_address[1]
    argv = ["--config-dir", str(config_dir), "--data-dir", str(data_dir), "healthcheck", "status"]
    assert cli.main([*argv, "--port", str(port)]) == 0
    token_file.write_text("")  # removed: the server (reading it live) refuses every token
    time.sleep(settings.RACY_S * 2)
    assert cli.main([*argv, "--port", str(port)]) == 1
    token_file.write_text("rotated-status-token-0123456789")  # rotated: both read it live
    time.sleep(settings.RACY_S * 2)
    assert cli.main([*argv, "--port", str(port)]) == 0
    closed = free_port()  # a port nobody serves
    token_file.write_text(TOKEN)
    assert cli.main([*argv, "--port", str(closed)]) == 1


def test_the_status_token_and_the_api_key_are_read_from_secret_files_live(
    config_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = Deployment(config_dir, data_dir)
    key_file = tmp_path / "honcho_api_key"
    monkeypatch.setenv("MEMHONCHO_API_KEY_FILE", str(key_file))
    assert deployment.api_key() is None  # named but absent: no key yet, no crash
    key_file.write_text("  key-from-a-file\n")
    assert deployment.api_key() == "key-from-a-file"
    time.sleep(settings.RACY_S * 2)
    key_file.write_text("rotated-key")
    assert deployment.api_key() == "rotated-key"
    monkeypatch.setenv("MEMHONCHO_API_KEY", "from-env")  # the variable still comes first
    assert deployment.api_key() == "from-env"
    token = tmp_path / "token"
    token.write_text(TOKEN)
    monkeypatch.setenv("MEMHONCHO_STATUS_TOKEN_FILE", str(token))
    assert status_token(deployment) == TOKEN


def test_an_unreadable_secret_file_warns_without_its_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "a-folder-not-a-file"
    folder.mkdir()
    assert settings.secret_file(str(folder)) is None
    assert "IsADirectoryError" in caplog.text


def test_the_example_host_captures_each_json_line_and_reports_refusals(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(data_dir))
    run = answered_run("c-1", "r-1", owner=None)
    lines = "\n".join([json.dumps(run), json.dumps(run), "not json", json.dumps({"x": 1}), ""])
    out = io.StringIO()
    assert example_host(io.StringIO(lines), out) == 1
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a.get("status") or a["code"] for a in answers] == [
        "captured",
        "duplicate",
        "ERR_NOT_JSON",
        "ERR_INVALID_EVENT",
    ]
    assert (data_dir / "data" / "outbox").is_dir()
