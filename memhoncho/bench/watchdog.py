"""``memhoncho bench watchdog``: one look of the workers' watchdog at 100,000 conversations.

A look is ``store.stranded.find`` (``worker/watchdog.py`` then claims and enqueues what it
found). Both stores hold 100,000 conversations, one in three with pending records (the status
bench's fixture, ``bench/status.py``, on the files; ``bench/pg.py``'s COPY load, three records
a conversation, on PostgreSQL, in a scratch database of its own). Every pending conversation
has its hint waiting (a fresh hint mark) but ``STRANDED``, which the look must find.

Figures per store: ``cold_first_s`` (a new process's first look with nothing saved: on the
files it reads every outbox and ledger once), ``cold_s`` (a new process's first look, as a
restarted worker has it: on the files the census rows saved by an earlier look or status
read), ``warm`` (the same reader again, nothing changed), ``warm_after_captures`` (1% of the
conversations captured to between two looks), and ``all_stranded_s`` (no hint waiting: every
pending conversation is found, each with a lock try), and ``honcho_down`` (no hint waiting,
every pending conversation's ledger holding a fresh failure: within its grace, so found by
none; the look must still learn that from each ledger). ``interval_s`` is the time between two
looks that follows from the warm look (the look and ``watchdog.pause_after`` it), and
``enqueued_within_s`` the worst delay from a conversation's bound to its hint:
``stranded.SETTLE_S`` + interval + one look. The goal is 15 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from memhoncho import ids
from memhoncho.bench.records import bench_record
from memhoncho.bench.status import DELIVERED_EVERY, PENDING_EVERY, build_store
from memhoncho.bench.status import _record as status_record
from memhoncho.deployment import Deployment, initialise
from memhoncho.models import Ledger
from memhoncho.store import hint_marks, stranded
from memhoncho.store.base import Record, Store
from memhoncho.store.lines import encode_line
from memhoncho.worker import watchdog
from memhoncho.worker.queue_depths import BusyQueues

CONVERSATIONS = 100_000
STRANDED = 100  # pending conversations with no hint waiting: the look must find these
CAPTURED_EVERY = 100  # warm_after_captures: one conversation in this many gets a new record
DEFAULT_SAMPLES = 5
GOAL_S = 15.0
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
HINT_AHEAD_S = 24 * 3600.0  # waiting hints are dated this far ahead: fresh for the whole run


def _stranded(conversations: int) -> set[int]:
    """The pending conversations left without a hint (every ``PENDING_EVERY``-th is pending)."""
    step = max(1, conversations // PENDING_EVERY // STRANDED) * PENDING_EVERY
    return set(range(step, conversations, step)[:STRANDED])


def _look(store: Store, deployment: Deployment) -> tuple[float, int]:
    started = time.perf_counter()
    current = deployment.settings()  # the look as the watchdog makes it, broker question too
    busy = BusyQueues(deployment, current)
    found = stranded.find(store, current, in_busy_queue=busy)
    return time.perf_counter() - started, len(found)


def _figures(
    new_store: Callable[[], Store],
    deployment: Deployment,
    samples: int,
    capture: Callable[[int], None],
    unhint: Callable[[], None],
    fail: Callable[[], None],
) -> dict[str, Any]:
    cold_first_s, found = _look(new_store(), deployment)
    cold_s, _ = _look(new_store(), deployment)
    store = new_store()
    _look(store, deployment)
    warm = [_look(store, deployment)[0] for _ in range(samples)]
    after_captures = []
    for sample in range(samples):
        capture(sample)
        after_captures.append(_look(store, deployment)[0])
    unhint()
    _look(store, deployment)  # the marks are gone: their listing is read again once
    all_stranded_s, all_found = _look(store, deployment)
    fail()
    _look(store, deployment)  # the changed ledgers are read once
    failing = [_look(store, deployment)[0] for _ in range(samples)]
    warm_s = statistics.median(warm)
    interval_s = warm_s + watchdog.pause_after(warm_s)
    within_s = stranded.SETTLE_S + interval_s + warm_s
    return {
        "found": found,
        "cold_first_s": round(cold_first_s, 3),
        "cold_s": round(cold_s, 3),
        "warm": _seconds(warm),
        "warm_after_captures": _seconds(after_captures),
        "all_stranded_s": round(all_stranded_s, 3),
        "all_stranded_found": all_found,
        "honcho_down": _seconds(failing),
        "interval_s": round(interval_s, 2),
        "enqueued_within_s": round(within_s, 2),
        "within_goal": within_s <= GOAL_S,
    }


def _seconds(samples: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(samples), 3), "max_s": round(max(samples), 3)}


# ---- the files ------------------------------------------------------------------------------


def write_json_fast(path: Path, text: str) -> None:
    """A ledger replaced as the store replaces it (a new file renamed over), without fsync."""
    temporary = path.with_suffix(".bench-tmp")
    temporary.write_text(text)
    temporary.replace(path)


def _pending_on_files(n: int) -> bool:
    """Whether ``build_store`` left conversation ``n`` pending: its ledger lags, or it has
    none yet (never delivered)."""
    return n % PENDING_EVERY == 0 or n % DELIVERED_EVERY == 1


def _files(root: Path, conversations: int, samples: int) -> dict[str, Any]:
    from memhoncho.store.files import FileStore

    initialise(root / "data")
    deployment = Deployment(root / "config", root / "data")
    layout = deployment.layout
    build_store(deployment, conversations)
    left = _stranded(conversations)
    ahead = time.time() + HINT_AHEAD_S
    pending = [n for n in range(conversations) if _pending_on_files(n)]
    for n in pending:
        if n not in left:
            key = ids.conversation_key(f"conversation-{n:05d}")
            hint_marks.claim(layout, key)
            os.utime(hint_marks.mark_path(layout, key), (ahead, ahead))

    def capture(sample: int) -> None:
        """A record appended and its hint claimed, as a capture does (without the fsync)."""
        for n in range(sample, conversations, CAPTURED_EVERY):
            conversation = f"conversation-{n:05d}"
            key = ids.conversation_key(conversation)
            record = status_record(conversation, 4 + sample, time.time())
            with layout.outbox(key).open("ab") as handle:
                handle.write(encode_line(record))
            hint_marks.claim(layout, key)

    def unhint() -> None:
        for path in hint_marks.marks_dir(layout).iterdir():
            path.unlink()

    def fail() -> None:
        """A failure recorded in every pending conversation's ledger, as a delivery does."""
        failure = {"code": "ERR_HONCHO_UNAVAILABLE", "message": "bench", "at": time.time() + 3600}
        for n in pending:
            conversation = f"conversation-{n:05d}"
            key = ids.conversation_key(conversation)
            ledger = store.read_ledger(key) or Ledger(conversation_id=conversation)
            write_json_fast(
                layout.ledger(key),
                ledger.model_copy(update={"failures": 1, "last_error": failure}).model_dump_json(),
            )

    store = FileStore(layout)
    return {
        "conversations": conversations,
        "pending": len(pending),
        **_figures(lambda: FileStore(layout), deployment, samples, capture, unhint, fail),
    }


# ---- PostgreSQL -----------------------------------------------------------------------------


def _postgresql(url: str, root: Path, conversations: int, samples: int) -> dict[str, Any]:
    import psycopg

    from memhoncho.bench.pg import TEXT, deployment_on, load, scratch_database
    from memhoncho.store import close_stores
    from memhoncho.store.postgres import PostgresStore

    per = 3
    with scratch_database(url) as scratch:
        load_s = load(scratch, conversations, per, lambda n: 1 if n % PENDING_EVERY == 0 else per)
        left = [ids.conversation_key(f"bench-{n:06d}") for n in _stranded(conversations)]
        with psycopg.connect(scratch, autocommit=True) as conn:
            conn.execute(
                "UPDATE memhoncho_conversations SET hint_at = %s"
                " WHERE pending_batches > 0 AND NOT key = ANY(%s)",
                (time.time() + HINT_AHEAD_S, left),
            )
            conn.execute("VACUUM ANALYZE memhoncho_conversations")
        deployment = deployment_on(root, scratch)
        settings = deployment.settings()
        opened: list[Store] = []

        def new_store() -> Store:
            close_stores()
            store = PostgresStore(scratch, connect_timeout_s=settings.store_timeout_s)
            opened.append(store)
            return store

        def capture(sample: int) -> None:
            """Captures that publish (each claims its hint mark), through the store."""
            store = opened[-1]
            for n in range(sample, conversations, CAPTURED_EVERY):
                conversation = f"bench-{n:06d}"
                record = bench_record(conversation, per + 1 + sample, time.time(), TEXT)
                store.append(
                    ids.conversation_key(conversation),
                    cast(Record, record),
                    max_pending=10**9,
                    after_write=lambda: None,
                )

        def unhint() -> None:
            with psycopg.connect(scratch, autocommit=True) as conn:
                conn.execute("UPDATE memhoncho_conversations SET hint_at = NULL")

        def fail() -> None:
            failure = {
                "code": "ERR_HONCHO_UNAVAILABLE",
                "message": "bench",
                "at": time.time() + 3600,
            }
            with psycopg.connect(scratch, autocommit=True) as conn:
                conn.execute(
                    "UPDATE memhoncho_conversations SET ledger = ledger"
                    " || jsonb_build_object('failures', 1, 'last_error', %s::jsonb)"
                    " WHERE pending_batches > 0",
                    (json.dumps(failure),),
                )

        try:
            figures = _figures(new_store, deployment, samples, capture, unhint, fail)
        finally:
            for store in opened:
                store.close()
    return {
        "conversations": conversations,
        "pending": len(range(0, conversations, PENDING_EVERY)),
        "load_s": round(load_s, 1),
        **figures,
    }


@contextlib.contextmanager
def _reachable(url: str) -> Iterator[str | None]:
    """None when the server answers, else why not (the bench then reports it and goes on)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5):
            pass
    except psycopg.Error as exc:
        yield f"{type(exc).__name__}: {exc}".strip()
        return
    yield None


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples = getattr(args, "samples", None) or DEFAULT_SAMPLES
    url = getattr(args, "store", None) or os.environ.get("MEMHONCHO_BENCH_PG_URL", DEFAULT_PG_URL)
    results: dict[str, Any] = {
        "samples": samples,
        "stranded": STRANDED,
        "interval_floor_s": watchdog.INTERVAL_S,
        "pause_factor": watchdog.PAUSE_FACTOR,
        "settle_s": stranded.SETTLE_S,
        "goal_s": GOAL_S,
        "load_1m_before": round(os.getloadavg()[0], 2),
    }
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-watchdog-") as tmp:
        results["files"] = _files(Path(tmp) / "files", CONVERSATIONS, samples)
        with _reachable(url) as unreachable:
            if unreachable:
                results["postgresql_unavailable"] = unreachable
            else:
                results["postgresql"] = _postgresql(url, Path(tmp) / "pg", CONVERSATIONS, samples)
    results["load_1m_after"] = round(os.getloadavg()[0], 2)
    results["cpus"] = os.cpu_count()
    return results
