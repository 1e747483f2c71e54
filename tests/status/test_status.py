"""The status view over real store files: figures, the marker, degraded buckets, queue depths.

Tests taking ``store_url`` run on both stores; the others are about the files themselves.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.models import ForkRecord, Ledger
from memhoncho.status.view import StatusReader, honcho_host, status_view
from memhoncho.store.atomic import write_json
from memhoncho.testing.config import write_api_key

API_KEY = "sk-status-test-SECRET"


def _context(config_dir: Path, data_dir: Path, **settings: Any) -> Deployment:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text(json.dumps(settings))
    return Deployment(config_dir, data_dir)


def _append(
    ctx: Deployment,
    conversation: str,
    run: str,
    *,
    owner: str | None,
    messages: int,
    captured_at: float,
) -> int:
    key = ids.conversation_key(conversation)
    record = {
        "batch_id": f"b-{conversation}-{run}",
        "conversation_id": conversation,
        "owner": owner,
        "user_peer_id": ids.peer_id(owner),
        "run_id": run,
        "captured_at": captured_at,
        "messages": [
            {"id": f"m{i}", "role": "user", "entry_id": i, "text": "hello", "meta": {}}
            for i in range(messages)
        ],
    }
    appended = ctx.store().append(key, record, max_pending=100)
    assert appended.seq is not None
    return appended.seq


def _ledger(ctx: Deployment, conversation: str, **fields: Any) -> None:
    ctx.store().write_ledger(
        ids.conversation_key(conversation),
        Ledger(conversation_id=conversation, **fields),
    )


def test_an_empty_store_answers_real_zeros_and_an_absent_marker(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    view = status_view(_context(config_dir, data_dir, store_url=store_url))
    assert view["outbox"]["state"] == "ok"
    assert view["outbox"]["pending_batches"] == 0
    assert view["outbox"]["oldest_pending_age_s"] == 0  # nothing pending: known, not "unknown"
    assert view["ledgers"] == {"state": "ok", "count": 0, "honcho_sessions": 0}
    assert view["last_delivery"]["marker"] == {"state": "absent"}
    assert view["last_delivery_at"] is None
    assert view["dead_letters"]["records"] == 0 and view["quarantine"]["lines"] == 0
    assert view["forks"]["pending"] == 0 and view["departures"]["count"] == 0


def test_pending_figures_count_only_what_the_ledger_has_not_delivered(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    ctx = _context(config_dir, data_dir, store_url=store_url)
    now = time.time()
    first = _append(ctx, "c-1", "r1", owner="ana", messages=2, captured_at=now - 500)
    _append(ctx, "c-1", "r2", owner="ana", messages=3, captured_at=now - 100)
    _append(ctx, "c-2", "r1", owner="bo", messages=1, captured_at=now - 50)
    _append(ctx, "c-3", "r1", owner="bo", messages=4, captured_at=now - 900)
    _ledger(ctx, "c-1", delivered_seq=first, session_id="s1", last_delivered_at=now - 10)
    c3_seq = _append(ctx, "c-3", "r2", owner="bo", messages=1, captured_at=now - 1)
    _ledger(ctx, "c-3", delivered_seq=c3_seq, session_id="s3", last_delivered_at=now - 20)
    view = status_view(ctx)
    outbox = view["outbox"]
    assert outbox["conversations"] == 3
    assert outbox["conversations_pending"] == 2
    assert outbox["pending_batches"] == 2  # c-1 r2, c-2 r1
    assert outbox["pending_messages"] == 4
    assert 499 > outbox["oldest_pending_age_s"] >= 99
    assert view["ledgers"]["count"] == 2 and view["ledgers"]["honcho_sessions"] == 2
    assert view["last_delivery"]["source"] == "ledgers"
    assert view["last_delivery_at"] == pytest.approx(now - 10)
    assert view["sources"] in ("ok", "degraded")
    assert "outbox" not in view["degraded"] and "ledgers" not in view["degraded"]


def test_a_second_read_sees_what_changed_since_the_first(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    ctx = _context(config_dir, data_dir, store_url=store_url)
    reader = StatusReader(ctx)
    seq = _append(ctx, "c-1", "r1", owner=None, messages=1, captured_at=time.time())
    assert reader.read()["outbox"]["pending_batches"] == 1
    _append(ctx, "c-1", "r2", owner=None, messages=1, captured_at=time.time())
    assert reader.read()["outbox"]["pending_batches"] == 2
    _ledger(ctx, "c-1", delivered_seq=seq)
    assert reader.read()["outbox"]["pending_batches"] == 1
    # a fresh reader (a new CLI run) uses the saved summary and agrees
    assert status_view(ctx)["outbox"]["pending_batches"] == 1


def test_a_corrupt_ledger_degrades_the_ledgers_and_flags_pending_as_an_upper_bound(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir)
    _append(ctx, "c-1", "r1", owner=None, messages=1, captured_at=time.time())
    _append(ctx, "c-2", "r1", owner=None, messages=1, captured_at=time.time())
    _ledger(ctx, "c-2", session_id="s2")
    ctx.layout.ledger(ids.conversation_key("c-1")).write_text("{torn")
    view = status_view(ctx)
    assert view["ledgers"]["state"] == "degraded"
    assert any("corrupt" in r for r in view["ledgers"]["reasons"])
    assert view["ledgers"]["honcho_sessions"] == 1
    assert view["outbox"]["state"] == "degraded"
    assert "upper bounds" in view["outbox"]["reasons"][0]
    assert view["outbox"]["pending_batches"] == 2
    assert {"ledgers", "outbox"} <= set(view["degraded"])


def test_an_outbox_that_cannot_be_read_degrades_the_outbox_bucket(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir)
    _append(ctx, "c-1", "r1", owner=None, messages=1, captured_at=time.time())
    ctx.layout.outbox("c-2").mkdir()  # a directory where a file should be: unreadable
    view = status_view(ctx)
    assert view["outbox"]["state"] == "degraded"
    assert "c-2.jsonl" in view["outbox"]["reasons"][0]
    assert view["outbox"]["pending_batches"] == 1


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"at": "yesterday"}', b"[]"], ids=["torn", "no-time", "not-object"]
)
def test_an_unreadable_marker_answers_absent_and_says_so(
    config_dir: Path, data_dir: Path, content: bytes
) -> None:
    ctx = _context(config_dir, data_dir)
    ctx.layout.last_delivery.parent.mkdir(parents=True, exist_ok=True)
    ctx.layout.last_delivery.write_bytes(content)
    view = status_view(ctx)
    last = view["last_delivery"]
    assert last["marker"]["state"] == "unreadable" and last["marker"]["reason"]
    assert last["marker_at"] is None and last["at"] is None
    assert last["state"] == "degraded" and "last_delivery" in view["degraded"]


def test_an_unreadable_marker_leaves_the_ledgers_delivery_time(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir)
    _ledger(ctx, "c-1", last_delivered_at=1000.0)
    ctx.layout.last_delivery.write_bytes(b"garbage")
    last = status_view(ctx)["last_delivery"]
    assert (last["at"], last["source"], last["marker"]["state"]) == (
        1000.0,
        "ledgers",
        "unreadable",
    )


@pytest.mark.parametrize(
    ("marker", "ledger", "source"), [(2000.0, 1000.0, "marker"), (1000.0, 2000.0, "ledgers")]
)
def test_the_newer_of_marker_and_ledgers_wins(
    config_dir: Path,
    data_dir: Path,
    marker: float,
    ledger: float,
    source: str,
    store_url: str | None,
) -> None:
    ctx = _context(config_dir, data_dir, store_url=store_url)
    _ledger(ctx, "c-1", last_delivered_at=ledger)
    ctx.store().mark_last_delivery({"at": marker})
    last = status_view(ctx)["last_delivery"]
    assert (last["at"], last["source"]) == (max(marker, ledger), source)
    assert last["marker"]["state"] == "ok"


def test_dead_letters_forks_and_departures_are_counted(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    ctx = _context(config_dir, data_dir, store_url=store_url)
    store = ctx.store()
    store.append_dead("c-1", [{"seq": 1, "batch_id": "a"}, {"seq": 2, "batch_id": "b"}], "test")
    store.append_dead("c-2", [{"seq": 1, "batch_id": "c"}], "test")
    store.create_fork("child", ForkRecord(parent_id="p", child_id="c", at_entry=1, created_at=1))
    store.write_departure("ana", DEPARTURE)
    assert_dead_forks_and_departures_counted(status_view(ctx))


DEPARTURE = {"peer_id": "ana", "at": 5.0, "purged": True}


def assert_dead_forks_and_departures_counted(view: dict[str, Any]) -> None:
    """Two dead-letter files holding three records, one pending fork, ana's departure."""
    assert view["dead_letters"] == {"state": "ok", "files": 2, "records": 3}
    assert view["forks"]["pending"] == 1
    assert view["departures"]["notices"] == [DEPARTURE]


def test_dead_letter_and_quarantine_files_are_counted_by_line(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir)
    ctx.layout.dead_dir.mkdir(parents=True)
    ctx.layout.dead("c-1").write_bytes(b"{}\n{}\n")
    ctx.layout.dead("c-2").write_bytes(b"{}\n")
    ctx.layout.quarantine_dir.mkdir(parents=True)
    ctx.layout.quarantine("c-1").write_bytes(b"{}\n{}\n{}\n")
    write_json(ctx.layout.pending_fork("child"), {"parent": "p"})
    write_json(ctx.layout.departures_dir / "ana.json", DEPARTURE)
    view = status_view(ctx)
    assert_dead_forks_and_departures_counted(view)
    assert view["quarantine"] == {"state": "ok", "files": 1, "lines": 3}


def test_the_config_summary_shows_no_key_and_no_credentials(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(
        config_dir, data_dir, base_url="https://admin:hunter2@honcho.example:8443/v3?token=abc"
    )
    write_api_key(config_dir, API_KEY)
    view = status_view(ctx)
    assert view["config"]["configured"] is True
    assert view["config"]["honcho_host"] == "https://honcho.example:8443"
    text = json.dumps(view)
    assert API_KEY not in text and "hunter2" not in text and "abc" not in text
    assert honcho_host("not a url") == "(unparsable URL)"


def test_the_config_summary_names_the_store_kind_never_its_url(
    config_dir: Path, data_dir: Path
) -> None:
    assert status_view(_context(config_dir, data_dir))["config"]["store"] == "files"
    # unreachable on purpose: the summary names the kind without connecting
    url = "postgresql://memhoncho:s3cret-pw@127.0.0.1:1/memhoncho"
    view = status_view(_context(config_dir, data_dir, store_url=url, store_timeout_s=0.5))
    assert view["config"]["store"] == "postgresql"
    assert "s3cret-pw" not in json.dumps(view)
    assert view["outbox"]["state"] == "degraded"  # the census says it cannot reach it


def test_queue_depths_come_from_redis(config_dir: Path, data_dir: Path, redis_url: str) -> None:
    # Partition 37 of 40: no worker of another test on this Redis consumes it.
    ctx = _context(config_dir, data_dir, broker_url=redis_url, partitions=40)
    exchange = Exchange("memhoncho", type="direct")
    queue = "memhoncho.deliver.37"
    with Connection(redis_url) as conn:
        producer = conn.Producer()
        Queue(queue, exchange, routing_key=queue)(conn.default_channel).declare()
        for _ in range(3):
            producer.publish({"x": 1}, exchange=exchange, routing_key=queue, priority=0)
        producer.publish({"x": 1}, exchange=exchange, routing_key=queue, priority=5)
    queues = status_view(ctx)["queues"]
    assert queues["state"] == "ok"
    assert queues["depths"][queue] == 4  # every priority level counted
    assert queues["depths"]["memhoncho.deliver.36"] == 0
    assert len(queues["depths"]) == 42


def test_queue_depths_come_from_the_embedded_broker_folder(
    config_dir: Path, data_dir: Path
) -> None:
    from memhoncho.celery_app import embedded_broker
    from memhoncho.worker.embedded_broker import TRANSPORT

    ctx = _context(config_dir, data_dir, partitions=2)
    url, options = embedded_broker(data_dir)
    exchange = Exchange("memhoncho", type="direct")
    # memhoncho's transport, as its hosts publish: kombu's own keeps one process-wide record
    # of bindings, so after another test's host declared this queue (another data dir) the
    # binding was never written here and both messages were dropped (depth 0).
    with Connection(url, transport=TRANSPORT, transport_options=options) as conn:
        Queue("memhoncho.deliver.1", exchange, routing_key="memhoncho.deliver.1")(
            conn.default_channel
        ).declare()
        for _ in range(2):
            conn.Producer().publish({"x": 1}, exchange=exchange, routing_key="memhoncho.deliver.1")
    queues = status_view(ctx)["queues"]
    assert queues["depths"] == {
        "memhoncho.deliver.0": 0,
        "memhoncho.deliver.1": 2,
        "memhoncho.recall": 0,
        "memhoncho.maintenance": 0,
    }


def test_an_unreachable_broker_degrades_the_queues_and_tasks_but_not_the_view(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir, broker_url="redis://127.0.0.1:1/0")
    view = status_view(ctx)
    assert view["queues"]["state"] == "degraded" and view["queues"]["depths"] is None
    assert "unreachable" in view["queues"]["reasons"][0]
    assert view["tasks"]["state"] == "degraded" and view["tasks"]["tasks"] is None
    assert view["outbox"]["state"] == "ok"


def test_task_results_show_in_the_view(config_dir: Path, data_dir: Path, redis_url: str) -> None:
    from memhoncho.errors import HonchoUnavailable
    from memhoncho.results import ErrorSummary
    from memhoncho.results.redis_store import RedisResults

    ctx = _context(config_dir, data_dir, broker_url=redis_url)
    store = RedisResults.from_url(redis_url)
    store.record_start("memhoncho.deliver", 10.0)
    store.record_failure(
        "memhoncho.deliver", 11.0, ErrorSummary.of(HonchoUnavailable()), retry=True
    )
    task = status_view(ctx)["tasks"]["tasks"]["memhoncho.deliver"]
    assert task["consecutive_failures"] == 1
    assert task["last_error_code"] == "ERR_HONCHO_UNAVAILABLE"


def test_a_corrupt_ledger_stays_degraded_until_it_is_repaired(
    config_dir: Path, data_dir: Path
) -> None:
    ctx = _context(config_dir, data_dir)
    seq = _append(ctx, "c-1", "r1", owner=None, messages=1, captured_at=time.time())
    path = ctx.layout.ledger(ids.conversation_key("c-1"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{torn")
    reader = StatusReader(ctx)
    assert reader.read()["ledgers"]["state"] == "degraded"
    assert reader.read()["ledgers"]["state"] == "degraded"  # a cached row never hides it
    assert status_view(ctx)["ledgers"]["state"] == "degraded"  # nor does the saved summary
    _ledger(ctx, "c-1", delivered_seq=seq)
    view = reader.read()
    assert view["ledgers"]["state"] == "ok" and view["outbox"]["state"] == "ok"
    assert view["outbox"]["pending_batches"] == 0


def test_a_damaged_summary_cache_is_rebuilt(config_dir: Path, data_dir: Path) -> None:
    from memhoncho.store.census import cache_path

    ctx = _context(config_dir, data_dir)
    _append(ctx, "c-1", "r1", owner=None, messages=2, captured_at=time.time())
    assert status_view(ctx)["outbox"]["pending_messages"] == 2
    data = cache_path(ctx.layout).read_bytes()
    for damaged in (b"junk", data[: len(data) // 2], data[:-3]):
        cache_path(ctx.layout).write_bytes(damaged)
        view = status_view(ctx)
        assert view["outbox"]["pending_messages"] == 2 and view["outbox"]["state"] == "ok"


def test_removed_conversations_leave_the_figures(
    config_dir: Path, data_dir: Path, store_url: str | None
) -> None:
    ctx = _context(config_dir, data_dir, store_url=store_url)
    reader = StatusReader(ctx)
    _append(ctx, "c-1", "r1", owner=None, messages=1, captured_at=time.time())
    _append(ctx, "c-2", "r1", owner=None, messages=1, captured_at=time.time())
    assert reader.read()["outbox"]["conversations_pending"] == 2
    ctx.store().remove_outbox(ids.conversation_key("c-2"))
    outbox = reader.read()["outbox"]
    assert (outbox["conversations"], outbox["conversations_pending"]) == (1, 1)


def test_the_summary_file_format_has_a_column_for_every_row_field() -> None:
    from memhoncho.store import census as summary
    from memhoncho.store import census_file as summary_file

    assert len(summary.INT_COLUMNS) == summary_file.INT_COLUMN_COUNT
    assert len(summary.FLOAT_COLUMNS) == summary_file.FLOAT_COLUMN_COUNT
