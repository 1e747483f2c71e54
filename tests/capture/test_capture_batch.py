"""``capture.batch``: many runs captured with one fsync per conversation's batch (the files),
each answered as ``Host.capture`` would answer it; on both stores."""

from __future__ import annotations

import os
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.batch import capture_batch
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.errors import CaptureTooLarge, InvalidEvent, OutboxCapacity, RunConflict
from memhoncho.models import CaptureResult, CaptureStatus
from memhoncho.store import outbox as outbox_module
from memhoncho.testing.config import write_settings
from memhoncho.testing.runs import answered_run, run_event


@pytest.fixture
def settings(config_dir: Any, store_url: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {"max_pending_batches": 6}
    if store_url is not None:
        values["store_url"] = store_url
    write_settings(config_dir, **values)
    return values


def statuses(answers: list[Any]) -> list[str]:
    return [str(a.status) if isinstance(a, CaptureResult) else type(a).__name__ for a in answers]


def test_each_run_is_answered_as_a_capture_would_and_the_accepted_are_stored_in_order(
    host: Host, deployment: Deployment
) -> None:
    host.capture(run_event("c1", 0))
    conflicting = {**run_event("c1", 0), "inputs": [{"entry_id": 0, "text": "other words"}]}
    events = [
        run_event("c1", 0),  # captured before: duplicate
        run_event("c1", 1),
        {"conversation_id": "c1"},  # malformed
        run_event("c1", 1),  # twice in the batch: the second a duplicate
        conflicting,  # run-0 with other content
        run_event("c2", 0),
        {**run_event("c1", 2), "selection": []},  # not selected
        run_event("c1", 3),
    ]
    answers = capture_batch(host, events)
    assert statuses(answers) == [
        "duplicate", "captured", "InvalidEvent", "duplicate", "RunConflict",
        "captured", "not-selected", "captured",
    ]  # fmt: skip
    assert isinstance(answers[2], InvalidEvent) and isinstance(answers[4], RunConflict)
    stored = deployment.store().records(ids.conversation_key("c1"))
    assert [r["run_id"] for r in stored] == ["run-0", "run-1", "run-3"]
    seqs = [r["seq"] for r in stored]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [r["run_id"] for r in deployment.store().records(ids.conversation_key("c2"))] == [
        "run-0"
    ]


def test_past_the_pending_ceiling_and_the_line_ceiling_a_run_is_refused_and_the_rest_go_on(
    host: Host, deployment: Deployment
) -> None:
    huge = answered_run("c1", "huge")
    huge["inputs"][0]["text"] = "x" * 2_000_000
    events = [huge, *(answered_run("c1", f"r{i}") for i in range(8))]
    answers = capture_batch(host, events)
    assert isinstance(answers[0], CaptureTooLarge)
    assert statuses(answers[1:7]) == ["captured"] * 6
    assert all(isinstance(a, OutboxCapacity) for a in answers[7:])
    assert len(deployment.store().records(ids.conversation_key("c1"))) == 6


def test_on_the_files_a_conversations_batch_is_one_fsync_of_the_outbox(
    host: Host, deployment: Deployment, monkeypatch: pytest.MonkeyPatch, store_url: str | None
) -> None:
    if store_url is not None:
        pytest.skip("the files' fsync; PostgreSQL commits each run's transaction")
    host.capture(run_event("c1", 0))  # the file exists: no directory fsync either
    synced: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(outbox_module.os, "fsync", counted)
    answers = capture_batch(host, [run_event("c1", i) for i in range(1, 6)])  # to the ceiling
    assert statuses(answers) == ["captured"] * 5
    assert len(synced) == 1
    assert len(deployment.store().records(ids.conversation_key("c1"))) == 6
    assert all(a.status is CaptureStatus.CAPTURED for a in answers if isinstance(a, CaptureResult))
