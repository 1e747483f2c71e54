"""``memhoncho bench sweep``: sweep and compaction time against outbox size, and the idle sweep.

At 1k, 10k and 100k records, 99% of them delivered (outbox files and ledgers built directly,
100 records a conversation, plus one conversation holding all of them): the first sweep
(enqueue + compaction), a sweep with only the 1% pending left, and the growth exponent (the
least-squares slope of log time over log records; goal <= 1.1). Then every record delivered:
a sweep with nothing pending, next to the cost of listing the conversations (names only, and
names with a stat each, the cheapest listing that can see an append). Enqueue is a no-op
counter, so the broker is not measured here.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.bench.records import bench_record
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.store.ledger import write_ledger
from memhoncho.store.lines import encode_line
from memhoncho.upkeep.sweep import sweep

SIZES = (1_000, 10_000, 100_000)  # records in the data directory
RECORDS_PER_CONVERSATION = 100
DELIVERED_FRACTION = 0.99
TEXT_CHARS = 300  # characters of each of a record's two messages
DEFAULT_SAMPLES = 3  # repetitions; the fastest is reported
GOAL_EXPONENT = 1.1


def _record(conversation: str, seq: int, now: float) -> dict[str, Any]:
    text = ("lorem ipsum " * (TEXT_CHARS // 12 + 1))[:TEXT_CHARS]
    return {"seq": seq, **bench_record(conversation, seq, now, text)}


def _build(
    deployment: Deployment, conversations: int, per_conversation: int, delivered: int
) -> None:
    now = time.time()
    layout = deployment.layout
    layout.outbox_dir.mkdir(parents=True, exist_ok=True)
    for c in range(conversations):
        conversation = f"bench-{c:05d}"
        key = ids.conversation_key(conversation)
        lines = b"".join(
            encode_line(_record(conversation, seq, now)) for seq in range(1, per_conversation + 1)
        )
        layout.outbox(key).write_bytes(lines)
        _deliver(deployment, conversation, delivered)
        for lock in (layout.outbox_lock(key), layout.conversation_lock(key)):
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.touch()  # capture and delivery made these long before any sweep


def _deliver(deployment: Deployment, conversation: str, seq: int) -> None:
    ledger = Ledger(conversation_id=conversation, delivered_seq=seq, last_delivered_at=time.time())
    write_ledger(deployment.layout, ids.conversation_key(conversation), ledger)


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def _fastest(action: Callable[[], Any], samples: int) -> float:
    return min(_timed(action)[0] for _ in range(samples))


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) over log(records)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-9)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def _list_with_stat(folder: Path) -> list[tuple[str, int]]:
    """The cheapest listing that sees a change: names and sizes, one scan and a stat each."""
    with os.scandir(folder) as entries:
        return sorted((e.name, e.stat().st_size) for e in entries if e.name.endswith(".jsonl"))


def _no_enqueue(conversation_id: str) -> bool:
    return True


def _one_size(root: Path, records: int, conversations: int, samples: int) -> dict[str, Any]:
    """Every figure for ``records`` records spread over ``conversations`` conversations."""
    per = records // conversations
    delivered = round(per * DELIVERED_FRACTION)
    compaction: list[float] = []
    for attempt in range(samples):
        deployment = Deployment(root / "config", root / f"data-{records}-{conversations}-{attempt}")
        _build(deployment, conversations, per, delivered)
        os.sync()  # capture fsynced every line long ago: no dirty backlog for the sweep to flush
        seconds, report = _timed(functools.partial(sweep, deployment, _no_enqueue))
        assert report.dropped_delivered == conversations * delivered, report
        compaction.append(seconds)
    pending_sweep = _fastest(lambda: sweep(deployment, _no_enqueue), samples)
    for c in range(conversations):
        _deliver(deployment, f"bench-{c:05d}", per)
    sweep(deployment, _no_enqueue)  # compacts the last records away
    first_look, _ = _timed(lambda: sweep(deployment, _no_enqueue))  # writes the sweep index
    idle = _fastest(lambda: sweep(deployment, _no_enqueue), samples)
    report = sweep(deployment, _no_enqueue)
    assert report.unchanged == conversations and report.pending == 0, report
    listing = _fastest(deployment.layout.conversation_keys, samples)
    listing_stat = _fastest(
        functools.partial(_list_with_stat, deployment.layout.outbox_dir), samples
    )
    for attempt in range(samples):
        shutil.rmtree(root / f"data-{records}-{conversations}-{attempt}", ignore_errors=True)
    return {
        "records": records,
        "conversations": conversations,
        "sweep_and_compaction_s": round(min(compaction), 4),
        "sweep_one_percent_pending_s": round(pending_sweep, 4),
        "nothing_pending": {
            "first_look_s": round(first_look, 5),
            "sweep_s": round(idle, 5),
            "listing_names_s": round(listing, 5),
            "listing_with_stat_s": round(listing_stat, 5),
            "sweep_over_listing_with_stat": round(idle / max(listing_stat, 1e-9), 2),
            "sweep_over_listing_names": round(idle / max(listing, 1e-9), 2),
        },
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    store_url = getattr(args, "store", None)
    if store_url:  # PostgreSQL at 1M records (memhoncho.bench.pg), instead of the files
        from memhoncho.bench.pg import sweep_figures

        with tempfile.TemporaryDirectory(prefix="memhoncho-bench-sweep-pg-") as tmp:
            return sweep_figures(store_url, Path(tmp))
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    spread: list[dict[str, Any]] = []
    single: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-sweep-") as tmp:
        root = Path(tmp)
        (root / "config").mkdir()
        for records in SIZES:
            spread.append(_one_size(root, records, records // RECORDS_PER_CONVERSATION, samples))
            single.append(_one_size(root, records, 1, samples))
    spread_exponent = _slope([(r["records"], r["sweep_and_compaction_s"]) for r in spread])
    single_exponent = _slope([(r["records"], r["sweep_and_compaction_s"]) for r in single])
    return {
        "delivered_fraction": DELIVERED_FRACTION,
        "records_per_conversation": RECORDS_PER_CONVERSATION,
        "samples": samples,
        "spread": spread,
        "single_conversation": single,
        "growth_exponent": round(spread_exponent, 3),
        "growth_exponent_single_conversation": round(single_exponent, 3),
        "goal_exponent": GOAL_EXPONENT,
        "meets_goal": spread_exponent <= GOAL_EXPONENT and single_exponent <= GOAL_EXPONENT,
    }
