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

from memhoncho.testing.ports import free_port

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


class PrivateNode:
    """A RabbitMQ node of its own (Debian's ``rabbitmq-server``, no plugins: no management
    listener) on a free port, with its data and logs in a temporary directory, so a test can
    stop and restart it without touching the machine's shared server.

    The node's settings come from files of its own (``RABBITMQ_CONF_ENV_FILE``,
    ``RABBITMQ_CONFIG_FILE``): the machine's ``/etc/rabbitmq`` names the shared node and port.
    """

    START_TIMEOUT_S = 90.0  # seconds for the Erlang VM and the broker to boot on a busy machine
    STOP_TIMEOUT_S = 60.0

    def __init__(self) -> None:
        import tempfile
        from pathlib import Path

        server = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
        if not server.exists():
            _unavailable("rabbitmq-server is not installed")
        self.server = server
        self.root = Path(tempfile.mkdtemp(prefix="memhoncho-rmq-"))
        self.port = free_port()
        self.dist_port = free_port()
        self.name = f"memhoncho{os.getpid()}{secrets.token_hex(3)}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        (self.root / "plugins").write_text("[].\n")
        (self.root / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (self.root / "env.conf").write_text("ERL_EPMD_ADDRESS=127.0.0.1\n")
        self._process: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.root),  # its own Erlang cookie
            RABBITMQ_CONF_ENV_FILE=str(self.root / "env.conf"),
            RABBITMQ_CONFIG_FILE=str(self.root / "rabbitmq.conf"),
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.root / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.root / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.root / "plugins"),
            RABBITMQ_PID_FILE=str(self.root / "pid"),
        )
        return env

    def start(self) -> PrivateNode:
        import time

        log = open(self.root / "server.out", "ab")  # noqa: SIM115 - the child keeps it open
        self._process = subprocess.Popen(
            [str(self.server)],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as one
        )
        log.close()
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the private RabbitMQ node exited: {self.log_tail()}")
            if self._accepts():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"the private RabbitMQ node did not start: {self.log_tail()}")

    def _accepts(self) -> bool:
        import kombu

        try:
            with kombu.Connection(self.url, connect_timeout=1) as conn:
                conn.ensure_connection(max_retries=1)
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def stop(self) -> None:
        """A clean stop (SIGTERM: the Erlang VM shuts the broker down); durable queues and
        persistent messages are on disk for the next start."""
        import signal

        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self) -> str:
        try:
            return (self.root / "server.out").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def destroy(self) -> None:
        import shutil

        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivateNode:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.destroy()
