"""The PostgreSQL side of ``memhoncho bench capture|sweep|status --store postgresql://...``.

Each run works in a scratch database of its own on the named server (created, brought to the
schema, dropped at the end), so a bench never touches a deployment's data; the URL's user needs
the CREATEDB privilege. Records for the sweep and status figures are loaded with COPY (1M by
default), the way an outbox of that size would look after a long broker outage.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.bench.figures import latency_figures, percentile
from memhoncho.bench.records import bench_record
from memhoncho.deployment import Deployment, initialise
from memhoncho.models import Ledger
from memhoncho.testing.config import write_settings

RECORDS = 1_000_000  # records loaded for the sweep and status figures
RECORDS_PER_CONVERSATION = 100
DELIVERED_FRACTION = 0.99  # of each conversation's records, for the sweep figures
PENDING_EVERY = 3  # status: one conversation in this many has undelivered records
STATUS_SAMPLES = 30
TEXT = "lorem ipsum dolor sit amet " * 4  # ~100 characters a message
FLOOR_SQL = "INSERT INTO bench_floor (record) VALUES (%s::jsonb)"


@contextmanager
def scratch_database(server_url: str) -> Iterator[str]:
    """A database of its own on ``server_url``'s server, at the current schema; dropped after."""
    import psycopg

    from memhoncho.store import close_stores, schema
    from memhoncho.testing.postgres import with_database

    name = f"memhoncho_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        schema.upgrade(url)
        yield url
    finally:
        close_stores()
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def deployment_on(root: Path, url: str, **settings: Any) -> Deployment:
    config = root / "config"
    write_settings(config, store_url=url, **settings)
    initialise(root / "data")  # as `memhoncho init`: a named folder is refused otherwise
    return Deployment(config, root / "data")


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


# ---- capture --------------------------------------------------------------------------------


def capture_figures(
    server_url: str,
    root: Path,
    samples: int,
    warmup: int,
    broker_url: str | None,
    make_run: Callable[[int], dict[str, Any]],
    api_key: str,
) -> dict[str, Any]:
    """Host.capture on PostgreSQL beside the floor: one INSERT of the same record and COMMIT
    (synchronous), on one connection to the same database, interleaved sample by sample.

    Beside it, the stricter floor of one round trip: the same INSERT in autocommit (its own
    implicit commit, as durable). psycopg runs ``INSERT; COMMIT`` as three round trips (BEGIN,
    INSERT, COMMIT); memhoncho's capture makes one, so both ratios are reported.
    """
    import psycopg

    from memhoncho.capture.host import Host
    from memhoncho.testing.config import write_api_key

    with scratch_database(server_url) as url:
        deployment = deployment_on(root, url, broker_url=broker_url, max_pending_batches=10**9)
        write_api_key(deployment.config_dir, api_key)
        floor = psycopg.connect(url, options="-c synchronous_commit=on")
        floor.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, record jsonb)")
        floor.commit()
        one_trip = psycopg.connect(url, options="-c synchronous_commit=on", autocommit=True)
        host = Host(deployment.config_dir, deployment.data_dir)
        key = ids.conversation_key(str(make_run(0)["conversation_id"]))
        store = deployment.store()
        capture_ms: list[float] = []
        floor_ms: list[float] = []
        one_trip_ms: list[float] = []

        def insert(record: str) -> None:
            floor.execute(FLOOR_SQL, (record,))
            floor.commit()

        def insert_autocommit(record: str) -> None:
            one_trip.execute(FLOOR_SQL, (record,))

        try:
            for i in range(warmup + samples):
                run = make_run(i)
                elapsed, _ = _timed(functools.partial(host.capture, run))
                record = json.dumps(store.edges(key)[1])  # the bytes the capture stored
                floor_elapsed, _ = _timed(functools.partial(insert, record))
                one_trip_elapsed, _ = _timed(functools.partial(insert_autocommit, record))
                if i >= warmup:
                    capture_ms.append(elapsed * 1000)
                    floor_ms.append(floor_elapsed * 1000)
                    one_trip_ms.append(one_trip_elapsed * 1000)
        finally:
            host.close()
            floor.close()
            one_trip.close()
    capture, bare = latency_figures(capture_ms), latency_figures(floor_ms)
    autocommit = latency_figures(one_trip_ms)
    return {
        "capture": capture,
        "floor_insert_commit": bare,
        "ratio_p50": round(capture["p50_ms"] / bare["p50_ms"], 3),
        "ratio_p99": round(capture["p99_ms"] / bare["p99_ms"], 3),
        "goal_ratio": 1.3,  # issue 33
        "floor_insert_autocommit": autocommit,
        "ratio_p50_autocommit": round(capture["p50_ms"] / autocommit["p50_ms"], 3),
    }


# ---- loading a large outbox -----------------------------------------------------------------


def load(url: str, conversations: int, per: int, delivered: Callable[[int], int]) -> float:
    """COPY ``conversations`` x ``per`` records and a ledger each (delivered up to
    ``delivered(n)``); the seconds it took (VACUUM ANALYZE included, as autovacuum would)."""
    import psycopg

    started = time.perf_counter()
    now = time.time()
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            with cur.copy(
                "COPY memhoncho_outbox (key, seq, batch_id, captured_at, messages, record,"
                " delivered) FROM STDIN"
            ) as copy:
                for n in range(conversations):
                    conversation = f"bench-{n:06d}"
                    key = ids.conversation_key(conversation)
                    upto = delivered(n)
                    for seq in range(1, per + 1):
                        record = bench_record(conversation, seq, now - 3600, TEXT)
                        copy.write_row(
                            (
                                key,
                                seq,
                                record["batch_id"],
                                now - 3600,
                                2,
                                json.dumps(record),
                                seq <= upto,
                            )
                        )
            with cur.copy(
                "COPY memhoncho_conversations (key, conversation_id, last_seq, delivered_seq,"
                " ledger, has_session, last_delivered_at, pending_batches, pending_messages)"
                " FROM STDIN"
            ) as copy:
                for n in range(conversations):
                    conversation = f"bench-{n:06d}"
                    upto = delivered(n)
                    ledger = Ledger(
                        conversation_id=conversation,
                        session_id=f"s{n}",
                        delivered_seq=upto,
                        last_delivered_at=now - n,
                    )
                    copy.write_row(
                        (
                            ids.conversation_key(conversation),
                            conversation,
                            per,
                            upto,
                            ledger.model_dump_json(),
                            True,
                            now - n,
                            per - upto,  # pending batches
                            2 * (per - upto),  # pending messages: two a record
                        )
                    )
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def _no_enqueue(conversation_id: str) -> bool:
    return True


# ---- sweep ----------------------------------------------------------------------------------


def sweep_figures(server_url: str, root: Path, records: int = RECORDS) -> dict[str, Any]:
    """The sweep at ``records`` records, 99% of each conversation's delivered: the first sweep
    (enqueue the 1% and delete the 99%), a sweep with only the 1% left, an idle sweep."""
    from memhoncho.upkeep.sweep import sweep

    conversations = records // RECORDS_PER_CONVERSATION
    per = RECORDS_PER_CONVERSATION
    delivered = round(per * DELIVERED_FRACTION)
    with scratch_database(server_url) as url:
        load_s = load(url, conversations, per, lambda n: delivered)
        deployment = deployment_on(root, url)
        first_s, first = _timed(lambda: sweep(deployment, _no_enqueue))
        assert first.dropped_delivered == conversations * delivered, first.failures[:3]
        pending_s, pending = _timed(lambda: sweep(deployment, _no_enqueue))
        store = deployment.store()
        for n in range(conversations):  # deliver the rest, as workers would
            key = ids.conversation_key(f"bench-{n:06d}")
            ledger = store.read_ledger(key)
            assert ledger is not None
            store.write_ledger(key, ledger.model_copy(update={"delivered_seq": per}))
        sweep(deployment, _no_enqueue)  # compacts the last records away
        idle_s, idle = _timed(lambda: sweep(deployment, _no_enqueue))
    return {
        "store": "postgresql",
        "records": records,
        "conversations": conversations,
        "load_s": round(load_s, 2),
        "sweep_and_compaction_s": round(first_s, 3),
        "dropped_delivered": first.dropped_delivered,
        "sweep_one_percent_pending_s": round(pending_s, 3),
        "pending_conversations": pending.pending,
        "nothing_pending_sweep_s": round(idle_s, 4),
        "failures": len(first.failures) + len(pending.failures) + len(idle.failures),
    }


# ---- status ---------------------------------------------------------------------------------


def status_figures(
    server_url: str, root: Path, records: int = RECORDS, samples: int = STATUS_SAMPLES
) -> dict[str, Any]:
    """The status view at ``records`` records, twice: one conversation in three with its
    newest 10 undelivered and the rest delivered but not yet compacted (a normal day), then
    every record undelivered (a long Honcho outage: the partial indexes hold them all)."""
    return {
        "store": "postgresql",
        "records": records,
        "mostly_delivered": _status_once(
            server_url,
            root / "mostly",
            records,
            samples,
            lambda n: (
                RECORDS_PER_CONVERSATION - 10
                if n % PENDING_EVERY == 0
                else RECORDS_PER_CONVERSATION
            ),
        ),
        "all_pending": _status_once(server_url, root / "all", records, samples, lambda n: 0),
    }


def _status_once(
    server_url: str, root: Path, records: int, samples: int, delivered: Callable[[int], int]
) -> dict[str, Any]:
    from memhoncho.status.view import StatusReader

    conversations = records // RECORDS_PER_CONVERSATION
    with scratch_database(server_url) as url:
        load_s = load(url, conversations, RECORDS_PER_CONVERSATION, delivered)
        deployment = deployment_on(root, url)
        first_s, view = _timed(StatusReader(deployment).read)
        reads = [_timed(StatusReader(deployment).read)[0] * 1000 for _ in range(samples)]
    outbox = view["outbox"]
    return {
        "conversations": conversations,
        "load_s": round(load_s, 2),
        "pending_batches": outbox["pending_batches"],
        "conversations_pending": outbox["conversations_pending"],
        "outbox_bucket": outbox.get("state"),
        "first_read_ms": round(first_s * 1000, 2),
        "read": {
            "p50_ms": round(statistics.median(reads), 2),
            "p99_ms": round(percentile(reads, 0.99), 2),
            "max_ms": round(max(reads), 2),
        },
    }
