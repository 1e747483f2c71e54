"""A command run with one stream on a pseudo-terminal, as from a user's shell: what it draws for
a terminal (colour, its width, a progress bar) is read back as text, the other stream piped."""

from __future__ import annotations

import os
import pty
import subprocess
from typing import Literal


def run_on_terminal(
    argv: list[str],
    *,
    stream: Literal["stdout", "stderr"],
    columns: int,
    timeout_s: float = 120.0,
) -> tuple[subprocess.CompletedProcess[bytes], str]:
    """Run ``argv`` with ``stream`` on a terminal ``columns`` wide (no NO_COLOR or
    FORCE_COLOR from the caller): the finished process and what the terminal received."""
    main, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(COLUMNS=str(columns), TERM="xterm")
    terminal_out = stream == "stdout"
    try:
        done = subprocess.run(
            argv,
            stdout=secondary if terminal_out else subprocess.PIPE,
            stderr=subprocess.PIPE if terminal_out else secondary,
            timeout=timeout_s,
            env=env,
            check=False,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other side is closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
    return done, b"".join(chunks).decode()
