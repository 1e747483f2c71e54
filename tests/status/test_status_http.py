"""The status server: bearer token, the JSON view, Prometheus text; and the status CLI."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from memhoncho import cli
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.status.http import METRICS_PATH, STATUS_PATH, StatusServer, status_token
from memhoncho.testing.processes import serving

TOKEN = "status-token-for-tests-0123456789"


def _get(url: str, token: str | None = None, scheme: str = "Bearer") -> tuple[int, bytes, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type") or ""


@pytest.fixture
def server(config_dir: Path, data_dir: Path) -> Iterator[StatusServer]:
    (config_dir / "secrets.json").write_text(
        json.dumps({"status-token": TOKEN, "api-key": "sk-KEY"})
    )
    with serving(StatusServer(Deployment(config_dir, data_dir), "127.0.0.1", 0)) as running:
        yield running


@pytest.mark.parametrize(
    ("token", "scheme"),
    [(None, "Bearer"), ("wrong", "Bearer"), (TOKEN, "Basic"), (TOKEN[:-1], "Bearer"), ("", "")],
    ids=["none", "wrong", "wrong-scheme", "prefix", "empty"],
)
@pytest.mark.parametrize("path", [STATUS_PATH, METRICS_PATH, "/elsewhere"])
def test_a_request_without_the_right_token_gets_401_and_nothing_else(
    server: StatusServer, token: str | None, scheme: str, path: str
) -> None:
    status, body, content_type = _get(server.url + path, token, scheme)
    assert (status, body, content_type) == (401, b"", "")


def test_the_status_path_answers_the_view_as_json(server: StatusServer) -> None:
    status, body, content_type = _get(server.url + STATUS_PATH, TOKEN)
    assert status == 200 and content_type == "application/json"
    view = json.loads(body)
    assert view["config"]["configured"] is True
    assert "sk-KEY" not in body.decode() and TOKEN not in body.decode()


def _parse_prometheus(text: str) -> dict[str, dict[str, float]]:
    """``{sample name: {label text: value}}`` through prometheus_client's own strict parser."""
    from prometheus_client.parser import text_string_to_metric_families

    assert text.endswith("\n")
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type in ("gauge", "counter"), family
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            assert labels not in samples.setdefault(sample.name, {}), f"repeated {sample}"
            samples[sample.name][labels] = sample.value
    return samples


def test_metrics_are_prometheus_text_that_parses(server: StatusServer, data_dir: Path) -> None:
    from memhoncho.store.atomic import write_json

    write_json(data_dir / "state" / "last-delivery.json", {"at": 1234.5})
    status, body, content_type = _get(server.url + METRICS_PATH, TOKEN)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    families = _parse_prometheus(body.decode())
    assert families["memhoncho_up"] == {"": 1.0}
    assert families["memhoncho_pending_batches"] == {"": 0.0}
    assert families["memhoncho_last_delivery_timestamp_seconds"] == {"": 1234.5}
    assert families["memhoncho_bucket_degraded"]['bucket="outbox"'] == 0.0
    assert families["memhoncho_oldest_pending_age_seconds"] == {"": 0.0}  # nothing pending
    assert families["memhoncho_health"]['verdict="degraded"'] == 1.0  # no beat, no worker
    assert families["memhoncho_health"]['verdict="healthy"'] == 0.0
    assert families["process_resident_memory_bytes"][""] > 0  # prometheus_client's own


def test_unknown_figures_are_left_out_of_the_metrics_not_zeroed(
    server: StatusServer, data_dir: Path
) -> None:
    (data_dir / "state" / "ledger").mkdir(parents=True)
    (data_dir / "state" / "ledger" / "c.json").write_text("{torn")
    (data_dir / "state" / "last-delivery.json").write_text("garbage")
    families = _parse_prometheus(_get(server.url + METRICS_PATH, TOKEN)[1].decode())
    assert "memhoncho_last_delivery_timestamp_seconds" not in families
    assert families["memhoncho_bucket_degraded"]['bucket="ledgers"'] == 1.0
    assert families["memhoncho_bucket_degraded"]['bucket="last_delivery"'] == 1.0
    outbox = data_dir / "data" / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    (outbox / "c.jsonl").mkdir()  # an outbox that cannot be read: pending age not known
    families = _parse_prometheus(_get(server.url + METRICS_PATH, TOKEN)[1].decode())
    assert "memhoncho_oldest_pending_age_seconds" not in families
    assert "memhoncho_pending_batches" in families  # what was read is still shown


def test_the_server_refuses_to_start_without_a_token(config_dir: Path, data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="status token"):
        StatusServer(Deployment(config_dir, data_dir), "127.0.0.1", 0)


def test_the_token_comes_from_secrets_first_then_the_setting(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = Deployment(config_dir, data_dir)
    assert status_token(deployment) is None
    monkeypatch.setenv("MEMHONCHO_STATUS_TOKEN", "from-env")
    assert status_token(deployment) == "from-env"
    (config_dir / "secrets.json").write_text(json.dumps({"status-token": {"value": "stored"}}))
    assert status_token(deployment) == "stored"


def test_memhoncho_status_prints_a_table_or_json(
    capsys: pytest.CaptureFixture[str], config_dir: Path, data_dir: Path
) -> None:
    assert cli.main(["status"]) == 0
    table = capsys.readouterr().out
    assert "pending_batches" in table and "last_delivery_at" in table
    assert cli.main(["status", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["outbox"]["pending_batches"] == 0
    assert view["config"]["configured"] is False


def test_memhoncho_serve_status_without_a_token_exits_with_the_config_error(
    capsys: pytest.CaptureFixture[str], config_dir: Path, data_dir: Path
) -> None:
    assert cli.main(["serve-status", "--port", "0"]) == 2
    assert "ERR_CONFIG" in capsys.readouterr().err


def test_a_rotated_token_applies_at_the_next_request_and_the_old_one_is_refused(
    server: StatusServer, config_dir: Path
) -> None:
    assert _get(server.url + STATUS_PATH, TOKEN)[0] == 200
    rotated = "rotated-status-token-9876543210"
    (config_dir / "secrets.json").write_text(json.dumps({"status-token": rotated}))
    assert _get(server.url + STATUS_PATH, TOKEN)[0] == 401
    assert _get(server.url + STATUS_PATH, rotated)[0] == 200
    (config_dir / "secrets.json").write_text(json.dumps({}))  # removed: nobody gets in
    assert _get(server.url + STATUS_PATH, rotated)[0] == 401


def test_a_silent_connection_is_closed_and_holds_no_thread(
    server: StatusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memhoncho.status import http

    assert http._Handler.timeout == http.REQUEST_TIMEOUT_S <= 30  # the server's own bound
    monkeypatch.setattr(http._Handler, "timeout", 0.5)  # the same mechanism, sooner
    host, port = server.server_address[:2]
    before = threading.active_count()
    silent = [socket.create_connection((str(host), port)) for _ in range(20)]
    try:
        for conn in silent:
            conn.settimeout(10)
            assert conn.recv(1) == b""  # closed by the server, having sent nothing
        assert _get(server.url + STATUS_PATH, TOKEN)[0] == 200
    finally:
        for conn in silent:
            conn.close()
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before
