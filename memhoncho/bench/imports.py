"""``memhoncho bench import``: an export into the outbox, then to Honcho, whole processes.

A generated JSONL export (``testing.exports``: ``--samples`` turns, default 20,000, in
conversations of 50) is imported by ``memhoncho import`` in its own process, as a user runs
it: turns per second into the outbox (the goal: 100,000 in 30 s, 3,333 a second) and the
process's peak memory. Then every conversation is delivered to a stand-in in this process:
``add_messages`` calls per 100 messages (Honcho takes 100 a call: the floor is 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memhoncho.deployment import Deployment, initialise
from memhoncho.testing import exports

DEFAULT_TURNS = 20_000
TURNS_PER_CONVERSATION = 50
GOAL_TURNS_PER_S = 100_000 / 30
KEY = "sk-bench-import"


def run(args: argparse.Namespace) -> dict[str, Any]:
    turns = getattr(args, "samples", None) or DEFAULT_TURNS
    conversations = max(1, turns // TURNS_PER_CONVERSATION)
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-import-") as tmp:
        root = Path(tmp)
        export = exports.write_lines(
            root / "history.jsonl",
            (exports.jsonl_conversation(c, TURNS_PER_CONVERSATION) for c in range(conversations)),
        )
        (root / "config").mkdir()
        initialise(root / "data")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "memhoncho", "--config-dir", str(root / "config"),
             "--data-dir", str(root / "data"), "import", str(export), "--json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"memhoncho import exited {done.returncode}: {done.stderr[-500:]}")
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        captured = json.loads(done.stdout)["totals"].get("captured", 0)
        calls, messages = _deliver(root, [f"jl-{c}" for c in range(conversations)])
    rate = captured / elapsed
    return {
        "turns": captured,
        "conversations": conversations,
        "import_process_s": round(elapsed, 2),
        "turns_per_s": round(rate),
        "goal_turns_per_s": round(GOAL_TURNS_PER_S),
        "ratio_to_goal": round(rate / GOAL_TURNS_PER_S, 3),
        "import_peak_rss_mb": round(peak_mb, 1),
        "messages_delivered": messages,
        "add_messages_calls": calls,
        "calls_per_100_messages": round(100 * calls / max(messages, 1), 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def _deliver(root: Path, conversations: list[str]) -> tuple[int, int]:
    """Deliver every conversation to a stand-in; its add_messages calls and messages."""
    from memhoncho.delivery.engine import deliver_conversation
    from memhoncho.testing import HonchoStandIn
    from memhoncho.testing.config import point_at_standin

    with HonchoStandIn(api_key=KEY) as standin:
        point_at_standin(root / "config", standin, "ws_bench_import", KEY)
        deployment = Deployment(root / "config", root / "data")
        delivered = sum(
            deliver_conversation(deployment, c).delivered_messages for c in conversations
        )
        calls = sum(
            1
            for method, path, _ in standin.state()["requests"]
            if method == "POST" and path.endswith("/messages")
        )
    return calls, delivered
