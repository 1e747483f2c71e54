"""The sweep without Celery: re-drive, compaction, retention, quarantine, replay, the index.

Tests taking ``deployment`` run on both stores; ``file_deployment`` ones are about the files
themselves (torn lines, mark lines, the sweep index).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.models import Ledger
from memhoncho.store import peek
from memhoncho.upkeep.replay import replay
from memhoncho.upkeep.sweep import sweep

DAY_S = 86_400.0


@pytest.fixture
def settings(store_url: str | None) -> dict[str, Any]:
    """The plugin's ``deployment`` runs on both stores (``store_url`` names the database in
    the environment, so a settings file this module writes keeps it)."""
    return {}


@pytest.fixture
def file_deployment(config_dir: Path, data_dir: Path) -> Deployment:
    return Deployment(config_dir, data_dir)


def _record(conversation: str, n: int, captured_at: float | None = None) -> dict[str, Any]:
    batch = f"b{conversation}{n:06d}"
    return {
        "batch_id": batch,
        "conversation_id": conversation,
        "owner": "ana",
        "user_peer_id": "ana",
        "run_id": f"r{n}",
        "captured_at": time.time() if captured_at is None else captured_at,
        "messages": [
            {"id": f"{batch}-0", "role": "user", "entry_id": n, "text": f"t{n}", "meta": {}}
        ],
    }


def _capture(
    deployment: Deployment,
    conversation: str,
    count: int,
    captured_at: float | None = None,
    start: int = 0,
) -> list[int]:
    store = deployment.store()
    key = ids.conversation_key(conversation)
    seqs = []
    for n in range(count):
        appended = store.append(
            key, _record(conversation, start + n, captured_at), max_pending=100_000
        )
        assert appended.seq is not None
        seqs.append(appended.seq)
    return seqs


def _deliver_up_to(deployment: Deployment, conversation: str, seq: int, **extra: Any) -> None:
    key = ids.conversation_key(conversation)
    deployment.store().write_ledger(
        key,
        Ledger(
            conversation_id=conversation,
            owner="ana",
            session_id="s",
            delivered_seq=seq,
            last_delivered_at=time.time(),
            **extra,
        ),
    )


def _dead_lettered(deployment: Deployment, conversation: str, records: int) -> str:
    """``records`` records captured past retention, moved to dead letters by a sweep."""
    _capture(deployment, conversation, records, captured_at=time.time() - 31 * DAY_S)
    sweep(deployment, Recorder())
    return ids.conversation_key(conversation)


def _outbox_seqs(deployment: Deployment, conversation: str) -> list[int]:
    return [r["seq"] for r in deployment.store().records(ids.conversation_key(conversation))]


class Recorder:
    def __init__(self, answer: bool = True) -> None:
        self.calls: list[str] = []
        self.answer = answer

    def __call__(self, conversation_id: str) -> bool:
        self.calls.append(conversation_id)
        return self.answer


def test_a_pending_conversation_is_enqueued_and_a_delivered_one_is_not(
    deployment: Deployment,
) -> None:
    _capture(deployment, "c.pending", 3)
    done = _capture(deployment, "c.done", 2)
    _deliver_up_to(deployment, "c.done", done[-1])
    enqueue = Recorder()
    report = sweep(deployment, enqueue)
    assert enqueue.calls == ["c.pending"]
    assert report.pending == 1 and report.enqueued == 1
    assert report.dropped_delivered == 2
    assert _outbox_seqs(deployment, "c.done") == []
    assert _outbox_seqs(deployment, "c.pending") != []


def test_compaction_keeps_every_pending_record_and_drops_the_delivered(
    deployment: Deployment,
) -> None:
    seqs = _capture(deployment, "c1", 10)
    _deliver_up_to(deployment, "c1", seqs[6])
    report = sweep(deployment, Recorder())
    assert _outbox_seqs(deployment, "c1") == seqs[7:]
    assert report.dropped_delivered == 7 and report.dead_lettered == 0
    # new captures after a full compaction still get larger seqs (the mark line)
    _deliver_up_to(deployment, "c1", seqs[-1])
    sweep(deployment, Recorder())
    assert _outbox_seqs(deployment, "c1") == []
    later = _capture(deployment, "c1", 1, start=10)
    assert later[0] > seqs[-1]


def test_records_past_retention_move_to_dead_letters_with_a_warning_each(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    old = time.time() - 31 * DAY_S
    old_seqs = _capture(deployment, "c.old", 3, captured_at=old)
    fresh = _capture(deployment, "c.old", 1, start=3)
    caplog.set_level(logging.WARNING, logger="memhoncho.upkeep.sweep")
    report = sweep(deployment, Recorder())
    assert report.dead_lettered == 3
    assert _outbox_seqs(deployment, "c.old") == fresh
    dead = deployment.store().read_dead(ids.conversation_key("c.old"))
    assert [r["seq"] for r in dead] == old_seqs
    assert all(r["dead_reason"] == "retention" for r in dead)
    warnings = [r for r in caplog.records if getattr(r, "action", "") == "dead_lettered"]
    assert len(warnings) == 3
    assert all("t0" not in r.getMessage() for r in warnings)  # no content in logs


def test_an_in_flight_record_is_never_dead_lettered(deployment: Deployment) -> None:
    old = time.time() - 40 * DAY_S
    seqs = _capture(deployment, "c.flight", 2, captured_at=old)
    batch = f"bc.flight{0:06d}"
    _deliver_up_to(deployment, "c.flight", 0, in_flight=[f"{batch}-0"])
    report = sweep(deployment, Recorder())
    assert report.dead_lettered == 1
    assert _outbox_seqs(deployment, "c.flight") == seqs[:1]


def test_retention_waits_while_a_delivery_holds_the_conversation(deployment: Deployment) -> None:
    old = time.time() - 40 * DAY_S
    seqs = _capture(deployment, "c.busy", 2, captured_at=old)
    key = ids.conversation_key("c.busy")
    with deployment.store().conversation_lock(key):
        report = sweep(deployment, Recorder())
    assert report.dead_lettered == 0
    assert report.conversations[0].retention_skipped
    assert _outbox_seqs(deployment, "c.busy") == seqs
    assert sweep(deployment, Recorder()).dead_lettered == 2


def test_replay_brings_dead_letters_back_once_and_the_next_sweep_keeps_them(
    deployment: Deployment,
) -> None:
    key = _dead_lettered(deployment, "c.r", 2)
    enqueue = Recorder()
    first = replay(deployment, enqueue=enqueue)
    assert (first.replayed, first.left) == (2, 0)
    assert enqueue.calls == ["c.r"]
    assert deployment.store().read_dead(key) == []
    records = deployment.store().records(key)
    assert [r["batch_id"] for r in records] == ["bc.r000000", "bc.r000001"]
    assert all("replayed_at" in r and "dead_at" not in r for r in records)
    again = replay(deployment, "c.r")
    assert again.replayed == 0
    report = sweep(deployment, Recorder())
    assert report.dead_lettered == 0 and report.pending == 1


def test_replay_after_a_crash_between_append_and_removal_appends_nothing_twice(
    deployment: Deployment,
) -> None:
    key = _dead_lettered(deployment, "c.crash", 2)
    store = deployment.store()
    dead = store.read_dead(key)
    replay(deployment, "c.crash")
    store.replace_dead(key, dead)  # as if the removal never happened
    second = replay(deployment, "c.crash")
    assert (second.replayed, second.already_present, second.left) == (0, 2, 0)
    assert len(store.records(key)) == 2


def test_torn_and_corrupt_lines_are_quarantined_and_good_ones_kept(
    file_deployment: Deployment,
) -> None:
    deployment = file_deployment
    seqs = _capture(deployment, "c.bad", 3)
    key = ids.conversation_key("c.bad")
    path = deployment.layout.outbox(key)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:20] + b"X" + lines[1][21:]
    path.write_bytes(b"".join(lines) + b'0000 {"torn')
    report = sweep(deployment, Recorder())
    assert report.quarantined == 2
    assert _outbox_seqs(deployment, "c.bad") == [seqs[0], seqs[2]]
    quarantine = deployment.layout.quarantine(key).read_text().splitlines()
    assert {json.loads(q)["reason"] for q in quarantine} == {"corrupt", "torn"}


def test_a_full_disk_is_a_store_error_per_conversation_and_the_sweep_goes_on(
    file_deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = file_deployment  # torn lines and a full disk: the files' own failures
    _capture(deployment, "c.torn", 2)
    _capture(deployment, "c.fine", 1)
    path = deployment.layout.outbox(ids.conversation_key("c.torn"))
    path.write_bytes(path.read_bytes() + b'0000 {"torn')

    def no_space(*_: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)  # the quarantine's append
    recorder = Recorder()
    report = sweep(deployment, recorder)
    monkeypatch.undo()
    assert [(f.stage, f.code) for f in report.failures] == [("conversation", "ERR_STORE")]
    assert "c.fine" in recorder.calls


def test_a_failing_enqueue_is_recorded_per_conversation_and_the_sweep_goes_on(
    deployment: Deployment,
) -> None:
    _capture(deployment, "c.a", 1)
    _capture(deployment, "c.b", 1)
    done = _capture(deployment, "c.c", 1)
    _deliver_up_to(deployment, "c.c", done[-1])

    def enqueue(conversation_id: str) -> bool:
        if conversation_id == "c.a":
            raise ConnectionError("broker down")
        return False

    report = sweep(deployment, enqueue)
    assert [(f.stage, f.conversation_id) for f in report.failures] == [
        ("enqueue", "c.a"),
        ("enqueue", "c.b"),
    ]
    assert report.dropped_delivered == 1


def test_a_corrupt_ledger_is_a_failure_and_its_outbox_is_left_whole(
    file_deployment: Deployment,
) -> None:
    deployment = file_deployment
    seqs = _capture(deployment, "c.l", 2)
    deployment.layout.ledger(ids.conversation_key("c.l")).parent.mkdir(parents=True, exist_ok=True)
    deployment.layout.ledger(ids.conversation_key("c.l")).write_text("{not json")
    enqueue = Recorder()
    report = sweep(deployment, enqueue)
    assert [f.code for f in report.failures] == ["ERR_CORRUPT_FILE"]
    assert enqueue.calls == ["c.l"]
    assert _outbox_seqs(deployment, "c.l") == seqs


def test_a_sweep_with_nothing_pending_reads_no_outbox(
    file_deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = file_deployment
    for n in range(5):
        seqs = _capture(deployment, f"c{n}", 2)
        _deliver_up_to(deployment, f"c{n}", seqs[-1])
    sweep(deployment, Recorder())  # compacts
    second = sweep(deployment, Recorder())  # looks, finds every one clean
    assert second.clean == 5
    looked: list[Path] = []
    monkeypatch.setattr(peek, "edges", lambda path: looked.append(path))
    third = sweep(deployment, Recorder())
    assert third.unchanged == 5 and looked == []
    _capture(deployment, "c3", 1, start=2)
    fourth = sweep(deployment, Recorder())
    assert fourth.unchanged == 4 and fourth.pending == 1


def test_a_torn_tail_is_repaired_by_the_newest_record_look(file_deployment: Deployment) -> None:
    _capture(file_deployment, "c1", 2)
    key = ids.conversation_key("c1")
    path = file_deployment.layout.outbox(key)
    path.write_bytes(path.read_bytes() + b'0000 {"torn')
    newest = file_deployment.store().newest_record(key)
    assert newest is not None and newest["seq"] == file_deployment.store().records(key)[-1]["seq"]
    assert path.read_bytes().endswith(b"\n")  # the torn bytes went to quarantine


def test_pending_records_before_a_trailing_mark_are_still_pending(
    file_deployment: Deployment,
) -> None:
    deployment = file_deployment
    old = time.time() - 40 * DAY_S
    _capture(deployment, "c.m", 2, captured_at=old)
    _deliver_up_to(deployment, "c.m", 0, in_flight=["bc.m000000-0"])
    first = sweep(
        deployment, Recorder()
    )  # the newest dies, the in-flight one stays: a mark follows
    assert first.dead_lettered == 1
    lines = deployment.layout.outbox(ids.conversation_key("c.m")).read_bytes().splitlines()
    assert b'"mark":true' in lines[-1]
    enqueue = Recorder()
    second = sweep(deployment, enqueue)
    assert enqueue.calls == ["c.m"] and second.pending == 1


def test_a_partly_delivered_record_is_never_dead_lettered(deployment: Deployment) -> None:
    old = time.time() - 40 * DAY_S
    seqs = _capture(deployment, "c.part", 2, captured_at=old)
    _deliver_up_to(deployment, "c.part", 0, delivered_partial=["bc.part000000-0"])
    assert sweep(deployment, Recorder()).dead_lettered == 1
    assert _outbox_seqs(deployment, "c.part") == seqs[:1]


def test_a_failed_fork_resolution_is_a_failure_and_the_sweep_goes_on(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memhoncho.delivery import forks

    monkeypatch.setattr(
        forks,
        "resolve_pending_forks",
        lambda deployment: [
            {"conversation_key": "child", "status": "failed", "code": "ERR_HONCHO_UNAVAILABLE"}
        ],
    )
    _capture(deployment, "c.f", 1)
    enqueue = Recorder()
    report = sweep(deployment, enqueue)
    assert [(f.stage, f.code) for f in report.failures] == [("forks", "ERR_HONCHO_UNAVAILABLE")]
    assert enqueue.calls == ["c.f"]


def test_sweep_and_replay_report_their_progress_up_to_the_whole(deployment: Deployment) -> None:
    old = time.time() - 31 * DAY_S
    for n in range(3):
        _capture(deployment, f"c.progress{n}", 1, captured_at=old)
    swept: list[tuple[int, int]] = []
    sweep(deployment, Recorder(), progress=lambda done, total: swept.append((done, total)))
    assert swept[0] == (0, 3) and swept[-1] == (3, 3)
    replayed: list[tuple[int, int]] = []
    report = replay(deployment, progress=lambda done, total: replayed.append((done, total)))
    assert report.replayed == 3
    assert replayed == [(1, 3), (2, 3), (3, 3)]
