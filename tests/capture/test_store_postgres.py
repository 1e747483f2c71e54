"""The PostgreSQL store's own promises: capture order across hosts, a typed error when the
database is down, the schema check, locks that die with their process (its hint marks,
conflicts, census and the move from files: ``test_store_postgres_moves.py``)."""

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
from memhoncho.errors import LockBusy, StoreSchemaBehind, StoreUnavailable
from memhoncho.models import Ledger
from memhoncho.store import close_stores, open_store
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
