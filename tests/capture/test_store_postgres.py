"""The PostgreSQL store's own promises: capture order across hosts, a typed error when the
database is down, the schema check, locks that die with their process, the move from files."""

from __future__ import annotations

import os
import signal
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
from memhoncho.errors import LockBusy, StoreSchemaBehind, StoreUnavailable
from memhoncho.models import CaptureStatus, ForkRecord, Ledger
from memhoncho.store import close_stores, open_store
from memhoncho.store.files import FileStore
from memhoncho.store.layout import Layout
from memhoncho.store.migrate import migrate
from memhoncho.store.postgres import SCHEMA_REVISION, PostgresStore
from memhoncho.testing.config import write_settings
from memhoncho.testing.postgres import private_database
from memhoncho.testing.runs import run_event

CONVERSATION = "shared-chat"
TURNS = 40  # turns captured alternately by the two host processes
STRESS_CAPTURES = 150  # captures per process when both capture at once
DOWN_TIMEOUT_S = 1.0  # store_timeout_s where the database is down


def _host_script(turns: str) -> str:
    """A host process: capture the given turns of CONVERSATION, each once the one before it
    is durable (whichever process captured it): the two processes take turns."""
    return textwrap.dedent(
        f"""
        import sys, time
        from memhoncho.capture.host import Host
        from memhoncho.testing.runs import run_event
        from memhoncho import ids
        host = Host(init=True)
        store = host.deployment.store()
        key = ids.conversation_key({CONVERSATION!r})
        for turn in {turns}:
            while len(store.records(key)) < turn:
                time.sleep(0.002)
            result = host.capture(run_event({CONVERSATION!r}, turn))
            assert result.status == "captured", result
        host.close()
        """
    )


def _spawn(script: str, config_dir: Path, data_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    env.update(MEMHONCHO_CONFIG_DIR=str(config_dir), MEMHONCHO_DATA_DIR=str(data_dir))
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env)


def _machine(tmp_path: Path, name: str, store_url: str) -> tuple[Path, Path]:
    """A host machine of its own: its own config and data directories, one shared database."""
    config_dir, data_dir = tmp_path / name / "config", tmp_path / name / "data"
    write_settings(config_dir, store_url=store_url)
    return config_dir, data_dir


def test_two_hosts_capturing_turns_of_one_conversation_store_them_in_capture_order(
    tmp_path: Path, postgres_url: str
) -> None:
    machines = [_machine(tmp_path, name, postgres_url) for name in ("a", "b")]
    procs = [
        _spawn(_host_script(f"range({k}, {TURNS}, 2)"), config, data)
        for k, (config, data) in enumerate(machines)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = open_store(tmp_path, postgres_url)
    records = store.records(ids.conversation_key(CONVERSATION))
    assert [r["run_id"] for r in records] == [f"run-{i}" for i in range(TURNS)]
    assert [r["seq"] for r in records] == list(range(1, TURNS + 1))
    for _, data_dir in machines:  # nothing of the conversation on either machine's disk
        assert not (data_dir / "data" / "outbox").exists()


def test_two_hosts_capturing_at_once_get_distinct_seqs_and_lose_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from memhoncho.capture.host import Host
        from memhoncho.testing.runs import run_event
        host = Host(init=True)
        offset = int(sys.argv[1])
        for i in range({STRESS_CAPTURES}):
            assert host.capture(run_event({CONVERSATION!r}, offset + i)).status == "captured"
        host.close()
        """
    )
    procs = []
    for k, name in enumerate(("a", "b")):
        config, data = _machine(tmp_path, name, postgres_url)
        procs.append(_spawn(script, config, data, str(k * STRESS_CAPTURES)))
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    records = open_store(tmp_path, postgres_url).records(ids.conversation_key(CONVERSATION))
    assert [r["seq"] for r in records] == list(range(1, 2 * STRESS_CAPTURES + 1))
    runs = [int(r["run_id"][len("run-") :]) for r in records]
    for k in range(2):  # each host's captures keep the order that host made them in
        mine = [i for i in runs if i // STRESS_CAPTURES == k]
        assert mine == list(range(k * STRESS_CAPTURES, (k + 1) * STRESS_CAPTURES))


def test_a_capture_while_the_database_is_unreachable_is_a_typed_error_at_once(
    config_dir: Path, data_dir: Path
) -> None:
    from memhoncho.testing.ports import free_port

    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens there
    write_settings(config_dir, store_url=url, store_timeout_s=DOWN_TIMEOUT_S)
    with Host(config_dir, data_dir) as host:
        for _ in range(2):  # the first builds the pool, the second meets the closed one
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                host.capture(run_event(CONVERSATION, 0))
            assert time.monotonic() - started < DOWN_TIMEOUT_S + 2.0
            assert caught.value.code == "ERR_STORE_UNAVAILABLE"
            assert "postgres@" not in caught.value.message  # no URL, no user in the error
    assert not (data_dir / "data").exists()  # no fallback to the files either
    close_stores()


def test_a_database_without_the_schema_is_a_clear_error_until_db_upgrade(
    postgres_url: str, tmp_path: Path
) -> None:
    from memhoncho.cli import main
    from memhoncho.store import schema
    from memhoncho.store.postgres import SCHEMA_REVISION

    with private_database(postgres_url, upgrade=False) as url:
        store = PostgresStore(url, connect_timeout_s=2)
        with pytest.raises(StoreSchemaBehind) as caught:
            store.read_ledger("k")
        assert caught.value.code == "ERR_STORE_SCHEMA"
        assert "memhoncho db upgrade" in caught.value.message
        schema.upgrade(url, "0001")  # a database one release behind, holding pending work
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO memhoncho_conversations (key, last_seq) VALUES ('k', 1);"
                "INSERT INTO memhoncho_outbox (key, seq, batch_id, messages, record)"
                " VALUES ('k', 1, 'b', 2, '{}')"
            )
        store.close()
        with pytest.raises(StoreSchemaBehind) as caught:
            store.read_ledger("k")
        assert caught.value.details == {"found": "0001", "needed": SCHEMA_REVISION}
        assert main(["db", "upgrade", "--url", url]) == 0
        assert store.read_ledger("k") is None
        assert (store.census().pending_batches, store.census().pending_messages) == (1, 2)
        store.close()


def test_an_upgrade_from_0003_adds_the_snapshot_table_and_keeps_the_state(
    postgres_url: str,
) -> None:
    from memhoncho.models import Snapshot
    from memhoncho.store import schema

    with private_database(postgres_url, upgrade=False) as url:
        assert schema.upgrade(url, "0003") == "0003"  # the release before snapshots
        behind = PostgresStore(url, connect_timeout_s=2)
        with pytest.raises(StoreSchemaBehind) as caught:
            behind.read_snapshot("k")
        assert caught.value.details == {"found": "0003", "needed": SCHEMA_REVISION}
        ledger = Ledger(conversation_id="k", session_id="s1", delivered_seq=3)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO memhoncho_conversations (key, conversation_id, last_seq, ledger,"
                " delivered_seq, has_session) VALUES ('k', 'k', 3, %s::jsonb, 3, true)",
                (ledger.model_dump_json(),),
            )
        assert schema.upgrade(url) == SCHEMA_REVISION
        assert schema.upgrade(url) == SCHEMA_REVISION  # again: nothing to do
        store = PostgresStore(url, connect_timeout_s=2)
        assert store.read_ledger("k") == ledger
        assert store.read_snapshot("k") is None and store.snapshot_times() == {}
        snapshot = Snapshot(
            conversation_id="k",
            workspace_id="w",
            user_peer_id="u",
            agent_peer_id="a",
            context_tokens=100,
            fetched_at=12.5,
        )
        store.write_snapshot("k", snapshot)
        assert store.read_snapshot("k") == snapshot and store.snapshot_times() == {"k": 12.5}
        assert store.remove_snapshot("k") and not store.remove_snapshot("k")
        store.close()
        behind.close()


def test_a_conversation_lock_dies_with_the_process_holding_it(
    postgres_url: str, tmp_path: Path
) -> None:
    ready = tmp_path / "locked"
    script = textwrap.dedent(
        f"""
        import time, pathlib
        from memhoncho.store.postgres import PostgresStore
        store = PostgresStore({postgres_url!r})
        with store.conversation_lock("held"):
            pathlib.Path({str(ready)!r}).write_text("yes")
            time.sleep(600)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        store = open_store(tmp_path, postgres_url)
        with pytest.raises(LockBusy), store.conversation_lock("held", timeout_s=0):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        with store.conversation_lock("held", timeout_s=5):  # the server let it go
            pass
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_ledger_write_under_a_lost_lock_fails_rather_than_overwrite(
    postgres_url: str, tmp_path: Path
) -> None:
    store = open_store(tmp_path, postgres_url)
    assert isinstance(store, PostgresStore)
    with store.conversation_lock("k", timeout_s=0):
        holder = store._held.conns["k"]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (holder.info.backend_pid,))
        with pytest.raises(StoreUnavailable):
            store.write_ledger("k", Ledger(conversation_id="k", delivered_seq=5))
    assert store.read_ledger("k") is None


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
