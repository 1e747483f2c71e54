"""Real Celery worker and beat processes for tests and the demo.

``CeleryProcess`` runs ``python -m celery -A memhoncho.celery_app worker|beat`` with memhoncho's
environment, waits until it is ready, and can kill its pool children with real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from socketserver import BaseServer

    from memhoncho.testing.standin import HonchoStandIn

T = TypeVar("T")
S = TypeVar("S", bound="BaseServer")

READY_TIMEOUT_S = 60.0  # seconds a worker may take to report ready
STOP_TIMEOUT_S = 20.0  # seconds a warm shutdown may take before SIGKILL
WAIT_S = 120.0  # seconds ``wait_until`` waits by default: generous, only a hang fails
POLL_S = 0.2  # seconds between two looks of ``wait_until``


def wait_until(
    check: Callable[[], T], what: str, timeout_s: float = WAIT_S, poll_s: float = POLL_S
) -> T:
    """The first truthy value of ``check()``, looked at every ``poll_s`` seconds; an
    ``AssertionError`` naming ``what`` if none comes within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def terminate(process: subprocess.Popen[Any], timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM, then SIGKILL if it has not ended after ``timeout_s``; its exit status."""
    process.terminate()
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering from a daemon thread until the block ends, then shut and closed."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def running(workers: list[CeleryProcess]) -> Iterator[list[CeleryProcess]]:
    """``workers`` started together (all spawned before any is awaited, so their start-up
    overlaps), stopped when the block ends however it ends."""
    try:
        for worker in workers:
            worker.start(wait=False)
        for worker in workers:
            worker.wait_ready()
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def memhoncho_env(
    *,
    config_dir: Path,
    data_dir: Path,
    broker_url: str | None = None,
    base_url: str | None = None,
    api_key: str | None = "test-key",
    workspace_id: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a memhoncho process needs, on top of this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    env.update(MEMHONCHO_CONFIG_DIR=str(config_dir), MEMHONCHO_DATA_DIR=str(data_dir))
    for name, value in (
        ("MEMHONCHO_BROKER_URL", broker_url),
        ("MEMHONCHO_BASE_URL", base_url),
        ("MEMHONCHO_API_KEY", api_key),
        ("MEMHONCHO_WORKSPACE_ID", workspace_id),
    ):
        if value is not None:
            env[name] = value
    env.update(extra or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def standin_env(
    config_dir: Path, data_dir: Path, broker_url: str, standin: HonchoStandIn, workspace_id: str
) -> dict[str, str]:
    """The environment of a memhoncho process that sends to ``standin`` (with its API key)
    over ``broker_url``."""
    return memhoncho_env(
        config_dir=config_dir,
        data_dir=data_dir,
        broker_url=broker_url,
        base_url=standin.url,
        api_key=standin.api_key,
        workspace_id=workspace_id,
    )


class CeleryProcess:
    """One ``celery worker`` or ``celery beat`` process. Use as a context manager.

    Its ``MEMHONCHO_DATA_DIR`` must be initialised first (``deployment.initialise``, as
    ``memhoncho init``; the ``data_dir`` fixture is): Celery's commands refuse a folder that
    is not, and ``wait_ready`` then raises with their ``ERR_NOT_INITIALISED`` line."""

    def __init__(
        self,
        kind: str,
        env: Mapping[str, str],
        *,
        queues: Sequence[str] = (),
        concurrency: int = 1,
        pool: str = "prefork",
        name: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.kind = kind
        self.env = dict(env)
        self.name = name or f"{kind}-{os.getpid()}-{time.monotonic_ns()}"
        args = [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", kind, "-l", "INFO"]
        if kind == "worker":
            args += ["-c", str(concurrency), "-P", pool, "-n", f"{self.name}@%h"]
            args += ["--without-gossip", "--without-mingle", "-E"]
            if queues:
                args += ["-Q", ",".join(queues)]
        elif kind == "beat":
            schedule = Path(self.env["MEMHONCHO_DATA_DIR"]) / f"celerybeat-{self.name}"
            args += ["-s", str(schedule)]
        self.args = args + list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        assert self._log is not None
        return Path(self._log.name)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self._log else ""

    def start(self, wait: bool = True) -> CeleryProcess:
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115  (closed in stop)
            prefix=f"{self.name}-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            self.args,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        marker = "ready." if self.kind == "worker" else "beat: Starting"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if marker in self.log_text():
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"celery {self.kind} exited early:\n{self.log_text()[-4000:]}")
            time.sleep(0.05)
        raise RuntimeError(
            f"celery {self.kind} not ready in {timeout_s}s:\n{self.log_text()[-4000:]}"
        )

    def children(self) -> list[int]:
        """Pids of the pool's child processes (prefork)."""
        if self.process is None:
            return []
        pid = self.process.pid
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill_child(self, sig: int = signal.SIGKILL) -> int | None:
        """Kill one pool child (the oldest); the parent replaces it. Returns its pid."""
        kids = self.children()
        if not kids:
            return None
        try:
            os.kill(kids[0], sig)
        except ProcessLookupError:
            return None
        return kids[0]

    def kill(self) -> None:
        """SIGKILL the whole process group: the parent and every child, at once."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL after ``timeout_s``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # stray children of a killed parent
        except (ProcessLookupError, PermissionError):
            pass
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> CeleryProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
