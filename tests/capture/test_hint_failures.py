"""A hint that fails for a reason other than the broker being down (an import error, a bug) is
logged with its cause once, counted in the status view, and costs no later hint; a refresh
asked for while the broker is known down is tried, and owed when it fails."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from host_capture_support import SECRET, run_event

from memhoncho import Host
from memhoncho.capture import hint_sender
from memhoncho.capture.hints import DeliverPublisher
from memhoncho.deployment import Deployment
from memhoncho.status.view import status_view
from memhoncho.worker import routing


def _queued(redis_url: str, queue: str) -> list[dict[str, Any]]:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    finally:
        client.close()


def _fail_once(monkeypatch: pytest.MonkeyPatch, name: str, error: Exception) -> list[int]:
    """``DeliverPublisher.<name>`` raises ``error`` at its first call, then works."""
    calls: list[int] = []
    real = getattr(DeliverPublisher, name)

    def flaky(self: DeliverPublisher, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeliverPublisher, name, flaky)
    return calls


def test_a_hint_failing_on_an_import_error_is_counted_and_the_next_hint_is_published(
    config_dir: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    _fail_once(monkeypatch, "publish", ModuleNotFoundError("No module named 'packaging'"))
    with (
        caplog.at_level(logging.INFO),
        Host(config_dir=config_dir, data_dir=data_dir, inline_hints=True) as host,
    ):
        first = host.capture(run_event("r-1", conversation="c-a"))
        second = host.capture(run_event("r-2", conversation="c-b"))
    assert first.enqueued is False
    assert second.enqueued is True, "a failure that is not the broker started the backoff"
    assert [m["headers"]["task"] for m in _queued(redis_url, routing.deliver_queue("c-b", 8))] == [
        routing.DELIVER_TASK
    ]
    failed = [r for r in caplog.records if getattr(r, "action", None) == "hint_failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None  # its cause, with the traceback
    assert not [r for r in caplog.records if getattr(r, "action", None) == "enqueue_failed"]
    view = status_view(Deployment.from_dirs(config_dir, data_dir))
    assert view["hints"]["failed"] == 1
    assert "ModuleNotFoundError" in view["hints"]["last_error"]
    assert "packaging" in view["hints"]["last_error"]
    assert any("delivery hint(s) failed" in reason for reason in view["health"]["reasons"])
    assert SECRET not in caplog.text and "hello" not in json.dumps(view)


def test_a_broker_outage_backs_off_and_is_not_counted_as_a_failed_hint(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    _fail_once(monkeypatch, "publish", ConnectionRefusedError(111, "Connection refused"))
    with Host(config_dir=config_dir, data_dir=data_dir, inline_hints=True) as host:
        first = host.capture(run_event("r-1", conversation="c-a"))
        second = host.capture(run_event("r-2", conversation="c-b"))
    assert first.enqueued is False and second.enqueued is False  # backed off: weather
    view = status_view(Deployment.from_dirs(config_dir, data_dir))
    assert view["hints"]["failed"] == 0


def test_a_refresh_asked_while_the_broker_is_known_down_is_tried_and_owed_until_it_goes(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    monkeypatch.setattr(hint_sender, "BROKER_BACKOFF_S", 60.0)
    _fail_once(monkeypatch, "publish", ConnectionRefusedError(111, "Connection refused"))
    refresh_queue = routing.MAINTENANCE_QUEUE
    with Host(config_dir=config_dir, data_dir=data_dir, inline_hints=True) as host:
        assert host.capture(run_event("r-1", conversation="c-a")).enqueued is False  # backoff on
        assert host.conversation_idle("c-a") is True, "the refresh was dropped by the backoff"
        assert len(_queued(redis_url, refresh_queue)) == 1

        real_send_task = type(host._sender.client()[0]).send_task
        sends: list[str] = []

        def send_task(app: Any, name: str, *args: Any, **kwargs: Any) -> Any:
            sends.append(name)
            if len(sends) == 1:
                raise ConnectionResetError(104, "Connection reset by peer")
            return real_send_task(app, name, *args, **kwargs)

        monkeypatch.setattr(type(host._sender.client()[0]), "send_task", send_task)
        assert host.conversation_archived("c-b") is False  # failed: owed
        assert host.conversation_idle("c-c") is True  # went through, and paid what was owed
    refreshed = [
        json.loads(__import__("base64").b64decode(m["body"]))[0][0]
        for m in _queued(redis_url, refresh_queue)
    ]
    assert sorted(refreshed) == ["c-a", "c-b", "c-c"]


def test_a_first_hint_on_the_embedded_broker_never_imports_kombus_redis_transport(
    tmp_path: Path,
) -> None:
    """On a plain install kombu's Redis transport cannot even be imported (it needs
    ``packaging``, which only kombu's redis extra brings); the embedded broker must not
    touch it."""
    code = """
import sys
from memhoncho.capture.hint_push import Pushers
from memhoncho.deployment import Deployment, initialise
from memhoncho.capture.hint_sender import HintSender
from pathlib import Path
root = Path(sys.argv[1])
(root / "config").mkdir()
initialise(root / "data")
deployment = Deployment.from_dirs(root / "config", root / "data")
app, publisher = HintSender(deployment, hinting=True, inline=True).client()
publisher.publish("c-1")
publisher.publish("c-2")
assert "kombu.transport.redis" not in sys.modules, "imported kombu's Redis transport"
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMHONCHO_API_KEY": "k"},
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
