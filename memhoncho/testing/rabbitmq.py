"""RabbitMQ for tests: a virtual host of its own on a shared server.

``private_vhost(server_url)`` adds ``memhoncho_test_<pid>_<random>`` with ``rabbitmqctl`` (the
guest user may use it), yields its ``amqp://`` URL and deletes it at the end: a test's queues
and messages meet no one else's. Without a reachable server (or ``rabbitmqctl``) it skips the
tests, or fails them when ``CI`` is set (CI must start RabbitMQ: ``.ci/run``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit

DEFAULT_SERVER = "amqp://guest:guest@127.0.0.1:5672//"
CTL_TIMEOUT_S = 60  # seconds for one rabbitmqctl call (an Erlang VM starts each time)


def _unavailable(message: str) -> None:
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must start it")
    pytest.skip(message)


def _ctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=CTL_TIMEOUT_S)


def reachable(server_url: str) -> bool:
    parts = urlsplit(server_url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2):
            return True
    except OSError:
        return False


@contextmanager
def private_vhost(server_url: str = DEFAULT_SERVER) -> Iterator[str]:
    """A fresh virtual host on the server of ``server_url``; its URL."""
    if not reachable(server_url):
        _unavailable(f"RabbitMQ is not reachable at {urlsplit(server_url).hostname}")
    if shutil.which("rabbitmqctl") is None:
        _unavailable("rabbitmqctl is not installed")
    name = f"memhoncho_test_{os.getpid()}_{secrets.token_hex(4)}"
    user = urlsplit(server_url).username or "guest"
    _ctl("add_vhost", name)
    try:
        _ctl("set_permissions", "-p", name, user, ".*", ".*", ".*")
        parts = urlsplit(server_url)
        yield parts._replace(path="/" + quote(name, safe="")).geturl()
    finally:
        try:
            _ctl("delete_vhost", name)
        except (subprocess.SubprocessError, OSError):
            pass  # left behind: empty once its connections closed, harmless
