"""A TCP port on 127.0.0.1 that nothing listens on, for a server a test or bench starts, or
for a service that must look down (a broker or a database at a closed port)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just gave out and took back: free now, nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
