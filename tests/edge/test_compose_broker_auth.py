"""compose.yaml's Redis, as its script runs it, on this machine: it refuses a client without
the generated password, shows the password on no command line, and a worker and a host that
read it from the secret file (``broker_password_file``) deliver through it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import initialise
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import CeleryProcess, memhoncho_env, terminate, wait_until
from memhoncho.testing.runs import expected_texts, run_event

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]
COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
KEY = "sk-compose-auth-key"


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """The redis service's own script, with a port and folder of this test's, the secret at
    a path of this test's and ``docker-entrypoint.sh`` (the image's) as a plain ``exec``."""
    script = yaml.safe_load(COMPOSE.read_text())["services"]["redis"]["command"][2]
    script = script.replace("$$", "$")  # compose's escape of a literal $
    secret = tmp_path / "broker_password"
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(tmp_path / "c"), "--data-dir"]
        + [str(tmp_path / "d"), "init", "--broker-password-file", str(secret)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (secret.stat().st_mode & 0o777) == 0o600 and len(secret.read_text()) == 64
    port = free_port()
    script = script.replace("/run/secrets/broker_password", str(secret)).replace(
        "redis-server - ", f"redis-server - --port {port} --dir {tmp_path} --save '' "
    )
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "docker-entrypoint.sh").write_text('#!/bin/sh\nexec "$@"\n')
    (shim / "docker-entrypoint.sh").chmod(0o755)
    process = subprocess.Popen(
        ["sh", "-c", script],
        env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until(lambda: _answers(url), "the compose Redis", 20)
        yield url, secret, process
    finally:
        terminate(process, timeout_s=10)


def _answers(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        client.ping()
    except redis.AuthenticationError:
        return True  # up, and asking for the password
    except redis.RedisError:
        return False
    finally:
        client.close()
    return True


def test_the_compose_redis_refuses_a_client_without_the_password(
    compose_redis: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    import redis

    url, secret, process = compose_redis
    client = redis.Redis.from_url(url)
    with pytest.raises(redis.AuthenticationError):
        client.lpush("memhoncho.recall", b"forged")
    client.close()
    password = secret.read_text()
    cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline
    for child in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
        assert password.encode() not in Path(f"/proc/{child}/cmdline").read_bytes()
    authed = redis.Redis.from_url(url, password=password)
    assert authed.ping() is True
    authed.close()


def test_a_worker_and_a_host_reading_the_secret_file_deliver_through_it(
    tmp_path: Path, compose_redis: tuple[str, Path, subprocess.Popen[bytes]]
) -> None:
    url, secret, _ = compose_redis
    config, data = tmp_path / "config", tmp_path / "data"
    initialise(data)
    with HonchoStandIn(api_key=KEY) as standin:
        settings: dict[str, Any] = {"broker_url": url, "broker_password_file": str(secret)}
        point_at_standin(config, standin, "compose-auth", KEY, **settings)
        env = memhoncho_env(config_dir=config, data_dir=data, api_key=None)
        with CeleryProcess("worker", env, name="compose-auth") as worker:
            with Host(config, data) as host:
                for i in range(3):
                    assert host.capture(run_event("c-auth", i)).enqueued is True
            session = ids.session_id("compose-auth", "c-auth")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                held = [m["content"] for m in standin.messages("compose-auth", session)]
                if len(held) >= 6:
                    break
                time.sleep(0.1)
            assert held == expected_texts("c-auth", 3), worker.log_text()[-2000:]
            assert secret.read_text() not in worker.log_text()
