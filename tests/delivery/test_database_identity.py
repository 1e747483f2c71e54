"""A PostgreSQL deployment's hints carry the database's own identity (migration 0007).

Before, they carried none, so a worker took any hint as its own: a host on another database,
or one still on its data directory while its workers had moved to PostgreSQL, captured where
no worker looked and nothing said so. The identity is a row of the database, so two machines
that reach it by different names agree, and two databases never do.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import redis

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, identity, initialise
from memhoncho.store.foreign_hints import read_foreign_hints
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.ports import free_port
from memhoncho.testing.postgres import private_database
from memhoncho.testing.runs import run_event
from memhoncho.worker import foreign, routing

PARTITIONS = 8  # the settings' default


@pytest.fixture(autouse=True)
def _settings_from_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMHONCHO_STORE_URL", raising=False)


def _on(root: Path, **settings: object) -> Deployment:
    deployment = Deployment(root / "config", root / "data")
    write_settings(deployment.config_dir, **settings)
    initialise(deployment.data_dir)
    return deployment


def _another_name(url: str) -> str:
    """The same database by another URL (connection parameters of its own: no other host
    name, which could reach the server by IPv6 and another pg_hba rule)."""
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}application_name=memhoncho-other&connect_timeout=7"


def test_a_database_is_known_by_its_identity_not_by_its_url(
    tmp_path: Path, postgres_url: str
) -> None:
    here = _on(tmp_path / "here", store_url=postgres_url)
    there = _on(tmp_path / "there", store_url=_another_name(postgres_url))
    on_files = _on(tmp_path / "files")
    found = here.hint_identity()
    assert found is not None and re.fullmatch(r"[0-9a-f]{32}", found)
    assert there.hint_identity() == found
    assert on_files.hint_identity() == (identity(on_files.data_dir) or {})["deployment_id"]
    assert on_files.hint_identity() != found
    with private_database(postgres_url) as other_url:
        assert _on(tmp_path / "other", store_url=other_url).hint_identity() != found


def test_a_hint_published_on_postgresql_carries_the_databases_identity(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    deployment = _on(tmp_path, store_url=postgres_url, broker_url=redis_url)
    write_api_key(deployment.config_dir, "k")
    with Host(deployment.config_dir, deployment.data_dir) as host:
        assert host.capture(run_event("conv-a", 0)).enqueued
    client = redis.Redis.from_url(redis_url)
    try:
        raw = client.lpop(routing.deliver_queue("conv-a", PARTITIONS))
    finally:
        client.close()
    assert raw is not None
    _, kwargs, _ = json.loads(base64.b64decode(json.loads(raw)["body"]))
    assert kwargs == {"deployment_id": deployment.hint_identity()}


def test_a_worker_on_postgresql_counts_a_hint_from_a_host_on_the_files(
    tmp_path: Path, postgres_url: str
) -> None:
    worker = _on(tmp_path / "worker", store_url=postgres_url)
    host_on_files = _on(tmp_path / "host")
    theirs = host_on_files.hint_identity()
    assert foreign.check(worker, "conv-a", worker.hint_identity()) is False
    assert foreign.check(worker, "conv-a", theirs) is True
    counted = read_foreign_hints(worker.layout)
    assert counted["count"] == 1 and theirs in counted["senders"]
    # ... and a worker on the files one from a host on the database
    assert foreign.check(host_on_files, "conv-a", worker.hint_identity()) is True


def test_a_database_out_of_reach_gives_no_identity_and_is_asked_again(
    tmp_path: Path, postgres_url: str
) -> None:
    closed = free_port()
    deployment = _on(
        tmp_path,
        store_url=f"postgresql://postgres@127.0.0.1:{closed}/nothing",
        store_timeout_s=0.5,
    )
    assert deployment.hint_identity() is None
    assert foreign.ours(deployment) is None  # not kept: the next hint asks again
    write_settings(deployment.config_dir, store_url=postgres_url)
    assert (
        foreign.ours(deployment)
        == Deployment(deployment.config_dir, deployment.data_dir).hint_identity()
    )
    assert foreign.ours(deployment) is not None
