"""A Redis for one test session that no other run on the machine shares.

Two test runs on one machine must not wipe each other's queues. In order of preference:

1. ``MEMHONCHO_TEST_REDIS_URL``: the caller names the database; it is flushed around each test
   (the caller gave it to the tests) and nothing else is touched.
2. ``redis-server`` installed: a private server on a free port, in a temporary directory, for
   the session; each test starts from FLUSHDB of that server's database 0. Stopped at the end.
3. Otherwise a database of the server on 127.0.0.1:6379 claimed with an exclusive ``fcntl``
   lock (``/tmp/memhoncho-test-redis-<port>-<db>.lock``, released by the kernel if the run
   dies), and only one that is empty when claimed. An owner key marks it; a test's cleanup
   flushes it only while that key is still this session's, so a database someone else
   started using is never flushed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import terminate

ENV_URL = "MEMHONCHO_TEST_REDIS_URL"
SHARED_HOST, SHARED_PORT = "127.0.0.1", 6379
#: databases of the shared server a run may claim (0 is left to whoever runs Redis by hand)
CLAIMABLE_DBS = range(1, 16)
OWNER_KEY = "memhoncho:test:owner"  #: in a claimed database: whose it is
START_TIMEOUT_S = 10.0  # seconds a private server gets to answer PING
START_ATTEMPTS = 5  # a free port can be taken between finding it and binding it


@dataclass
class RedisPlace:
    """Where this session's tests put Redis data, and how a test gets a fresh one."""

    url: str
    kind: str  #: "override", "private" or "claimed"
    reason: str | None = None  #: why there is none (then ``url`` is empty)
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    _cleanup: list[Any] = field(default_factory=list, repr=False)

    def fresh(self) -> None:
        """Empty the database before a test, if it is this session's to empty."""
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=2)
        try:
            if self.kind == "claimed":
                # Missing: a test flushed its own database. Another owner: not ours any more.
                owner = client.get(OWNER_KEY)
                if owner is not None and owner != self.owner.encode():
                    raise RuntimeError(f"{self.url} is no longer this test session's; not flushed")
                client.flushdb()
                client.set(OWNER_KEY, self.owner)
            else:
                client.flushdb()
        finally:
            client.close()

    def close(self) -> None:
        while self._cleanup:
            with contextlib.suppress(Exception):
                self._cleanup.pop()()


def open_place(env_url: str = ENV_URL) -> RedisPlace:
    """This session's Redis (see the module docstring; ``$env_url`` names the caller's own);
    ``reason`` set when there is none."""
    url = os.environ.get(env_url)
    if url:
        return RedisPlace(url=url, kind="override")
    binary = shutil.which("redis-server")
    if binary is not None:
        return _private(binary)
    return _claimed()


def pings(url: str) -> bool:
    """Whether a Redis answers at ``url`` within half a second."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _private(binary: str) -> RedisPlace:
    workdir = Path(tempfile.mkdtemp(prefix="memhoncho-test-redis-"))
    for _ in range(START_ATTEMPTS):
        port = free_port()
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                "--logfile",
                str(workdir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            if pings(url):
                place = RedisPlace(url=url, kind="private")
                place._cleanup.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
                place._cleanup.append(lambda p=process: _stop(p))
                return place
            time.sleep(0.05)
        _stop(process)  # it lost the port to someone, or never came up: another port
    shutil.rmtree(workdir, ignore_errors=True)
    return RedisPlace(url="", kind="private", reason=f"{binary} did not start on a free port")


def _stop(process: subprocess.Popen[bytes]) -> None:
    terminate(process, timeout_s=5)


def _claimed() -> RedisPlace:
    import redis

    shared = f"redis://{SHARED_HOST}:{SHARED_PORT}"
    if not pings(f"{shared}/0"):
        return RedisPlace(
            url="", kind="claimed", reason=f"no redis-server and no Redis at {shared}"
        )
    for db in CLAIMABLE_DBS:
        lock_path = Path(tempfile.gettempdir()) / f"memhoncho-test-redis-{SHARED_PORT}-{db}.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # another run holds it
        url = f"{shared}/{db}"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            if client.dbsize() != 0:  # someone's data, or a crashed run's: not ours to flush
                os.close(fd)
                continue
            place = RedisPlace(url=url, kind="claimed")
            client.set(OWNER_KEY, place.owner)
        finally:
            client.close()
        place._cleanup.append(lambda fd=fd: os.close(fd))
        place._cleanup.append(lambda p=place: _release(p))
        return place
    return RedisPlace(url="", kind="claimed", reason=f"every database of {shared} is taken")


def _release(place: RedisPlace) -> None:
    """Empty the claimed database at the end, while it is still this session's."""
    place.fresh()
    import redis

    client = redis.Redis.from_url(place.url, socket_connect_timeout=1)
    try:
        client.delete(OWNER_KEY)
    finally:
        client.close()


@contextlib.contextmanager
def session_place() -> Iterator[RedisPlace]:
    place = open_place()
    try:
        yield place
    finally:
        place.close()
