"""The PostgreSQL store beside the rest of memhoncho: its hint marks, a stalled transaction,
run conflicts, the census counters, and the move from the file store (``store migrate``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.errors import StoreUnavailable
from memhoncho.models import CaptureStatus, ForkRecord, Ledger
from memhoncho.store import close_stores, open_store
from memhoncho.store.files import FileStore
from memhoncho.store.layout import Layout
from memhoncho.store.migrate import migrate
from memhoncho.store.postgres import PostgresStore
from memhoncho.testing.config import write_settings
from memhoncho.testing.runs import run_event

CONVERSATION = "shared-chat"
DOWN_TIMEOUT_S = 1.0  # store_timeout_s where the database is down


def test_store_migrate_copies_pending_records_ledgers_and_forks_once(
    config_dir: Path, data_dir: Path, postgres_url: str
) -> None:
    files_deployment = Deployment(config_dir, data_dir)
    with Host(config_dir, data_dir) as host:
        for i in range(5):
            assert host.capture(run_event(CONVERSATION, i)).status == CaptureStatus.CAPTURED
        host.capture(run_event("other", 0))
        host.conversation_forked(CONVERSATION, "child", 3)
    source = FileStore(files_deployment.layout)
    key = ids.conversation_key(CONVERSATION)
    records = source.records(key)
    source.write_ledger(
        key,
        Ledger(
            conversation_id=CONVERSATION,
            session_id="s1",
            delivered_seq=records[1]["seq"],
            delivered_batches=[r["batch_id"] for r in records[:2]],
        ),
    )
    source.append_dead("dead-one", [{"seq": 1, "batch_id": "bx", "messages": []}], "retention")
    target = open_store(data_dir, postgres_url)
    assert isinstance(target, PostgresStore)

    first = migrate(source, target)
    second = migrate(source, target)

    assert (first.records_copied, first.ledgers_copied, first.forks_copied) == (4, 1, 1)
    assert (second.records_copied, second.records_present, second.forks_copied) == (0, 4, 0)
    assert first.dead_copied == 1 and second.dead_copied == 0
    assert [r["batch_id"] for r in target.pending(key, 0)] == [r["batch_id"] for r in records[2:]]
    assert target.read_ledger(key) == source.read_ledger(key)
    fork = target.read_fork(ids.conversation_key("child"))
    assert fork == ForkRecord.model_validate(source.read_fork(ids.conversation_key("child")))
    # Capture goes on after the copied records, never before them.
    write_settings(config_dir, store_url=postgres_url)
    with Host(config_dir, data_dir) as host:
        assert host.capture(run_event(CONVERSATION, 5)).status == CaptureStatus.CAPTURED
        assert host.capture(run_event(CONVERSATION, 0)).status == CaptureStatus.DUPLICATE
    after = target.pending(key, 0)
    assert after[-1]["run_id"] == "run-5" and after[-1]["seq"] > records[-1]["seq"]


def test_neither_the_file_store_nor_importing_memhoncho_loads_the_database_driver(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from memhoncho.capture.host import Host
        from memhoncho.testing.runs import run_event
        with Host({str(tmp_path / "c")!r}, {str(tmp_path / "d")!r}, init=True) as host:
            host.capture(run_event("c", 0))
        loaded = [m for m in ("psycopg", "psycopg_pool", "alembic", "sqlalchemy")
                  if m in sys.modules]
        assert not loaded, loaded
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_doctor_checks_the_database_store_answers_at_the_current_schema(
    config_dir: Path, data_dir: Path, postgres_url: str
) -> None:
    from memhoncho.cli import doctor
    from memhoncho.testing.ports import free_port

    write_settings(config_dir, store_url=postgres_url)
    assert doctor.check_store(Deployment(config_dir, data_dir)).verdict == "pass"
    close_stores()
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/x"
    write_settings(config_dir, store_url=down, store_timeout_s=DOWN_TIMEOUT_S)
    check = doctor.check_store(Deployment(config_dir, data_dir))
    assert check.verdict == "fail" and "ERR_STORE_UNAVAILABLE" in check.detail
    assert "postgres@" not in check.detail
    close_stores()


def test_a_capture_hints_after_its_commit_and_only_when_no_hint_waits(
    postgres_url: str, tmp_path: Path
) -> None:
    store = open_store(tmp_path, postgres_url)
    record = {**run_event(CONVERSATION, 0), "batch_id": "b0", "messages": []}
    seen: list[int] = []

    def hint() -> None:  # a worker woken by the hint reads the clock at once
        seen.append(store.newest_seq("k"))

    first = store.append("k", {**record, "batch_id": "b0"}, max_pending=10, after_write=hint)
    assert seen == [first.seq]  # committed before the hint: the worker sees the record
    second = store.append("k", {**record, "batch_id": "b1"}, max_pending=10, after_write=hint)
    assert seen == [first.seq]  # the hint that waits covers it: no second publish
    assert "k" in store.hint_marks()  # type: ignore[attr-defined]
    store.take_hint("k")  # type: ignore[attr-defined]
    third = store.append("k", {**record, "batch_id": "b2"}, max_pending=10, after_write=hint)
    assert seen == [first.seq, third.seq] and second.seq == first.seq + 1  # type: ignore[operator]


def test_a_retry_of_an_unreachable_honcho_claims_the_database_mark_as_a_capture_would(
    postgres_url: str, tmp_path: Path
) -> None:
    # The never-sent retry (worker/tasks.py) keeps one retrying hint a conversation through the
    # store's mark: a file mark here would never be taken by the next delivery (it takes the
    # database's), so the second retry would end the loop and the outage heal at the sweep.
    from memhoncho.store import hint_marks

    store = open_store(tmp_path, postgres_url)
    record = {**run_event(CONVERSATION, 0), "batch_id": "b0", "messages": []}
    store.append("k", record, max_pending=10, after_write=lambda: None)  # claims the mark
    assert not store.claim_hint("k")  # the capture's hint waits
    for _ in range(3):  # each retried delivery takes the mark, then retries again
        store.take_hint("k")  # type: ignore[attr-defined]
        assert store.claim_hint("k")
    assert not hint_marks.mark_path(Layout(tmp_path), "k").exists(), "no file mark here"


def test_a_capture_behind_a_stalled_transaction_fails_typed_instead_of_hanging(
    config_dir: Path, data_dir: Path, postgres_url: str
) -> None:
    from memhoncho.store.postgres import LOCK_TIMEOUT_MS

    write_settings(config_dir, store_url=postgres_url)
    with Host(config_dir, data_dir) as host:
        host.capture(run_event(CONVERSATION, 0))
        with psycopg.connect(postgres_url) as stalled:  # holds the conversation's row
            stalled.execute(
                "UPDATE memhoncho_conversations SET last_seq = last_seq WHERE key = %s",
                (ids.conversation_key(CONVERSATION),),
            )
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                host.capture(run_event(CONVERSATION, 1))
            assert time.monotonic() - started < LOCK_TIMEOUT_MS / 1000 + 3.0
            stalled.rollback()
        assert host.capture(run_event(CONVERSATION, 1)).status == CaptureStatus.CAPTURED


def test_a_run_id_with_other_content_is_a_conflict_before_and_after_delivery(
    config_dir: Path, data_dir: Path, postgres_url: str
) -> None:
    from memhoncho.delivery.fold import fold
    from memhoncho.errors import RunConflict

    write_settings(config_dir, store_url=postgres_url)
    key = ids.conversation_key(CONVERSATION)
    edited = {**run_event(CONVERSATION, 0), "inputs": [{"entry_id": 0, "text": "edited"}]}
    with Host(config_dir, data_dir) as host:
        host.capture(run_event(CONVERSATION, 0))
        with pytest.raises(RunConflict):
            host.capture(edited)
        store = host.deployment.store()
        [record] = store.records(key)
        delivered = {m["id"]: f"h{i}" for i, m in enumerate(record["messages"])}
        ledger = fold(Ledger(conversation_id=CONVERSATION), [record], delivered,
                      batch_window=200, anchor_window=1000, now=1.0)  # fmt: skip
        store.write_ledger(key, ledger)
        store.rewrite(key, keep=lambda r: False)  # compacted: only the ledger remembers it
        assert host.capture(run_event(CONVERSATION, 0)).status == CaptureStatus.DUPLICATE
        with pytest.raises(RunConflict):
            host.capture(edited)
        assert store.records(key) == []


def test_the_census_counters_agree_with_the_records_after_every_kind_of_change(
    postgres_url: str, tmp_path: Path
) -> None:
    store = open_store(tmp_path, postgres_url)

    def counted() -> tuple[int, int]:
        census = store.census()
        return census.pending_batches, census.pending_messages

    def actual() -> tuple[int, int]:
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(messages), 0) FROM memhoncho_outbox"
                " WHERE NOT delivered"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    for key in ("a", "b"):
        for i in range(5):
            record = {**run_event(key, i), "batch_id": f"{key}{i}", "messages": [{}] * (i + 1)}
            store.append(key, record, max_pending=100)  # type: ignore[arg-type]
    assert counted() == actual() == (10, 30)
    store.write_ledger("a", Ledger(conversation_id="a", delivered_seq=2))  # delivers a0, a1
    assert counted() == actual() == (8, 27)
    store.rewrite("a", keep=lambda r: r["seq"] != 4)  # a pending record leaves (retention)
    assert counted() == actual() == (7, 23)
    store.compact_delivered()  # delivered records leave: no pending change
    assert counted() == actual() == (7, 23)
    store.remove_outbox("b")  # an operator's purge
    assert counted() == actual() == (2, 8)
    assert store.census().conversations_pending == 1


def test_the_store_migrate_command_reports_what_it_copied_and_copies_nothing_twice(
    config_dir: Path, data_dir: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from memhoncho.cli import main

    with Host(config_dir, data_dir) as host:
        for i in range(3):
            host.capture(run_event(CONVERSATION, i))
    args = ["store", "migrate", "--to", postgres_url, "--json", "--data-dir", str(data_dir)]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert (first["records_copied"], second["records_copied"]) == (3, 0)
    assert second["records_present"] == 3


def test_store_migrate_copies_the_representation_snapshots_once_and_keeps_newer_ones(
    data_dir: Path, postgres_url: str
) -> None:
    from memhoncho.models import Snapshot
    from memhoncho.store.layout import Layout

    source = FileStore(Layout(data_dir))

    def snapshot(name: str, fetched_at: float) -> Snapshot:
        return Snapshot(
            conversation_id=name,
            workspace_id="w",
            user_peer_id="u",
            agent_peer_id="a",
            representation=f"{name} at {fetched_at}",
            context_tokens=100,
            fetched_at=fetched_at,
        )

    source.write_snapshot("one", snapshot("one", 1.0))
    source.write_snapshot("two", snapshot("two", 2.0))
    source.layout.cache("torn").write_bytes(b'{"representation": "half')
    target = open_store(data_dir, postgres_url)
    assert isinstance(target, PostgresStore)
    target.write_snapshot("two", snapshot("two", 9.0))  # a refresh already wrote a newer one

    first = migrate(source, target)
    second = migrate(source, target)

    assert (first.snapshots_copied, first.snapshots_present, first.snapshots_unreadable) == (
        1,
        1,
        1,
    )
    assert (second.snapshots_copied, second.snapshots_present) == (0, 2)
    assert first.errors == []
    assert target.read_snapshot("one") == snapshot("one", 1.0)
    assert target.read_snapshot("two") == snapshot("two", 9.0)
    assert target.snapshot_times() == {"one": 1.0, "two": 9.0}
