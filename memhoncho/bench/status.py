"""``memhoncho bench status``: how long the status view takes to read at 10k conversations.

The store is built directly (outbox lines, ledgers, dead letters; no capture path), on the
embedded broker. Three figures: the first read (no summary cache yet), a new reader per read as
``memhoncho status`` does (it loads the saved summary), and one reader kept as the status
server does. The target is <= 100 ms.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.bench.figures import latency_figures, percentile
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.status.view import StatusReader
from memhoncho.store.lines import encode_line

CONVERSATIONS = 10_000
PENDING_EVERY = 3  # one conversation in this many has undelivered records
DELIVERED_EVERY = 10  # ... and one in this many (of the rest) has no ledger yet
DEFAULT_SAMPLES = 30
TARGET_MS = 100.0


def _record(conversation: str, seq: int, captured_at: float) -> dict[str, Any]:
    return {
        "seq": seq,
        "batch_id": f"b{seq}",
        "conversation_id": conversation,
        "owner": "ana",
        "user_peer_id": "ana",
        "run_id": f"r{seq}",
        "captured_at": captured_at,
        "messages": [
            {"id": f"b{seq}-0", "role": "user", "entry_id": 1, "text": "x" * 200, "meta": {}},
            {"id": f"b{seq}-1", "role": "agent", "entry_id": 2, "text": "y" * 400, "meta": {}},
        ],
    }


def build_store(deployment: Deployment, conversations: int) -> None:
    """Outboxes, ledgers and a few dead letters, written directly (no fsync: it is a bench)."""
    layout = deployment.layout
    for directory in (layout.outbox_dir, layout.ledger_dir, layout.dead_dir):
        directory.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for n in range(conversations):
        conversation = f"conversation-{n:05d}"
        key = ids.conversation_key(conversation)
        pending = n % PENDING_EVERY == 0
        records = [_record(conversation, seq, now - 3600 + seq) for seq in (1, 2, 3)]
        layout.outbox(key).write_bytes(b"".join(encode_line(r) for r in records))
        if n % DELIVERED_EVERY == 1:
            continue  # never delivered: no ledger
        ledger = Ledger(
            conversation_id=conversation,
            owner="ana",
            session_id=f"s{n}",
            delivered_seq=1 if pending else 3,
            delivered_batches=["b1"] if pending else ["b1", "b2", "b3"],
            last_delivered_at=now - n,
        )
        layout.ledger(key).write_bytes(ledger.model_dump_json().encode())
    for n in range(0, conversations, 1000):
        layout.dead(f"conversation-{n:05d}").write_bytes(b'{"dead":true}\n' * 3)
    (layout.broker_dir / "queue").mkdir(parents=True, exist_ok=True)


def _timed(read: Any) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    view = read()
    return (time.perf_counter() - start) * 1000, view


def _figures(samples: list[float]) -> dict[str, float]:
    return {**latency_figures(samples, digits=2), "max_ms": round(max(samples), 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    store_url = getattr(args, "store", None)
    if store_url:  # PostgreSQL at 1M records (memhoncho.bench.pg), instead of the files
        from memhoncho.bench.pg import status_figures

        with tempfile.TemporaryDirectory(prefix="memhoncho-bench-status-pg-") as tmp:
            return status_figures(store_url, Path(tmp), samples=samples)
    conversations = CONVERSATIONS
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-status-") as tmp:
        deployment = Deployment(Path(tmp) / "config", Path(tmp) / "data")
        build_store(deployment, conversations)
        first_ms, view = _timed(StatusReader(deployment).read)
        fresh = [_timed(StatusReader(deployment).read)[0] for _ in range(samples)]
        kept_reader = StatusReader(deployment)
        kept_reader.read()
        kept = [_timed(kept_reader.read)[0] for _ in range(samples)]
    outbox = view["outbox"]
    return {
        "conversations": conversations,
        "samples": samples,
        "pending_batches": outbox["pending_batches"],
        "conversations_pending": outbox["conversations_pending"],
        "sources": view["sources"],
        "health": view["health"]["verdict"],
        "first_read_ms": round(first_ms, 2),
        "cli_read": _figures(fresh),
        "server_read": _figures(kept),
        "target_ms": TARGET_MS,
        "within_target": max(percentile(fresh, 0.99), percentile(kept, 0.99)) <= TARGET_MS,
    }
