"""A real ``memhoncho relay`` process for tests and ``bench cli``: started on given folders,
ready once its socket accepts, stopped with SIGTERM (SIGKILL past a timeout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from memhoncho import dirs
from memhoncho.capture.relay_socket import listening
from memhoncho.testing.processes import terminate

READY_TIMEOUT_S = 30.0


class RelayProcess:
    """``memhoncho relay`` on ``config_dir``/``data_dir``. Use as a context manager."""

    def __init__(
        self, config_dir: Path, data_dir: Path, extra_env: Mapping[str, str] | None = None
    ) -> None:
        self.config_dir, self.data_dir = config_dir, data_dir
        self.socket_path = Path(dirs.relay_socket(data_dir))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
        self.env.update(extra_env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RelayProcess:
        from memhoncho.deployment import initialise

        initialise(self.data_dir)  # as `memhoncho init` does: the relay refuses a new folder
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memhoncho", "--config-dir", str(self.config_dir)]
            + ["--data-dir", str(self.data_dir), "relay"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not listening(str(self.socket_path)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the relay did not serve its socket: {self.stderr()!r}")
            time.sleep(0.05)
        return self

    def stderr(self) -> str:
        if self.proc is None or self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL; the exit status (negative: the signal that ended it)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            terminate(self.proc, timeout_s)
        return self.proc.returncode

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PublishRecorder:
    """A relay's ``publish`` for tests: records each conversation hinted, or fails when told."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.fail = False

    def __call__(self, conversation_id: str) -> bool:
        if self.fail:
            return False
        self.published.append(conversation_id)
        return True
