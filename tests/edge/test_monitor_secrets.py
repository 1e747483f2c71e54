"""What Celery's monitors show of a worker (``celery inspect conf``, which Flower's config page
reads too) never holds the store's password, the Honcho key or the broker's password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from memhoncho.deployment import initialise
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.processes import CeleryProcess, memhoncho_env

pytestmark = pytest.mark.slow

STORE_PASSWORD = "s3cret-store-pw"  # trust auth on the test server: any password is taken
API_KEY = "sk-monitor-secret-key-0123456789"


def test_celery_inspect_conf_of_a_live_worker_shows_no_password_and_no_key(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    parts = urlsplit(postgres_url)
    netloc = f"{parts.username or 'postgres'}:{STORE_PASSWORD}@{parts.hostname}:{parts.port}"
    store_url = urlunsplit(parts._replace(netloc=netloc))
    config, data = tmp_path / "config", tmp_path / "data"
    write_settings(config, broker_url=redis_url, store_url=store_url, workspace_id="monitor")
    write_api_key(config, API_KEY)
    initialise(data)
    env = memhoncho_env(config_dir=config, data_dir=data, api_key=None)
    with CeleryProcess("worker", env, name="monitored") as worker:
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", "inspect", "conf"]
            + [
                "--json",
                "--timeout",
                "10",
                "-d",
                f"{worker.name}@{__import__('socket').gethostname()}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    shown = json.loads(done.stdout)
    assert shown, "the worker answered nothing"
    text = json.dumps(shown)
    assert "memhoncho_data_dir" in text  # the worker's own conf was read
    assert STORE_PASSWORD not in text
    assert API_KEY not in text
