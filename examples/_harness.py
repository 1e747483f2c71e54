"""What the three framework examples share: ``memhoncho demo``'s machinery (the Honcho
stand-in, a worker and beat on the embedded broker, in a temporary data directory) and the
closing look at what reached Honcho. Not an example itself."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.cli.demo import DEMO_WORKSPACE, Demo
from memhoncho.honcho import adapter

OWNER = "ana@example.com"
DELIVERY_TIMEOUT_S = 60.0  # seconds for the worker to deliver every turn


@contextmanager
def running(name: str) -> Iterator[tuple[Demo, Host]]:
    """The stand-in, a worker and beat, and a ``Host`` on them; all stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix=f"memhoncho-{name}-"))
    demo = Demo(root)
    try:
        with demo.stack:
            demo.start()
            host = Host(demo.config_dir, demo.data_dir)
            demo.stack.callback(host.close, 5)
            yield demo, host
    finally:
        shutil.rmtree(root, ignore_errors=True)


def show_delivered(demo: Demo, conversation: str, expected: int) -> int:
    """Wait for the worker, print what Honcho holds of the conversation; 0 when it is all
    there, in order, each once."""
    client = adapter.read_client(demo.deployment.honcho_target())
    session = ids.session_id(DEMO_WORKSPACE, conversation)
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    held: list[dict] = []
    while time.monotonic() < deadline:
        try:
            held = adapter.list_messages(client, session)
        except Exception:  # the session may not exist yet
            held = []
        if len(held) >= expected:
            break
        time.sleep(0.2)
    demo.say(f"what reached Honcho (session {session}):")
    for message in held:
        flag = "  (not answered)" if message["metadata"].get("unanswered") else ""
        demo.out(f"      {message['peer_id']:>22}: {message['content'][:110]}{flag}")
    if len(held) != expected:
        demo.say(f"FAILED: Honcho holds {len(held)} messages, expected {expected}")
        return 1
    demo.say(f"ok: {expected} messages, in order, each once")
    return 0
