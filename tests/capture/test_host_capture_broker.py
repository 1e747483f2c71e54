"""Host.capture beside a broker (down, live, inherited by a forked child) and in many processes:
never slowed by the broker, every line written once, durable past SIGKILL.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import select
import signal
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from host_capture_support import (
    BROKER_DOWN_BUDGET_MS,
    CONTENT,
    SECRET,
    records,
    run_event,
)

from memhoncho import Host, ids
from memhoncho.errors import (
    CaptureTooLarge,
    InvalidEvent,
    InvalidId,
    MemhonchoError,
    OutboxCapacity,
)
from memhoncho.settings import SECRETS_FILE
from memhoncho.store.layout import Layout
from memhoncho.store.lines import decode_line
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_settings
from memhoncho.testing.ports import free_port
from memhoncho.worker import routing

# ---- the broker ---------------------------------------------------------------------------


@pytest.mark.parametrize("inline", [False, True], ids=["hint-thread", "inline"])
def test_a_broker_that_is_down_does_not_slow_capture_past_50_ms(
    config_dir: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    inline: bool,
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    latencies: list[float] = []
    with (
        caplog.at_level(logging.DEBUG),
        Host(config_dir=config_dir, data_dir=data_dir, inline_hints=inline) as host,
    ):
        for i in range(20):
            start = time.perf_counter()
            result = host.capture(run_event(f"r-{i}", inputs=[{"entry_id": i, "text": CONTENT}]))
            latencies.append((time.perf_counter() - start) * 1000)
            assert result.status == "captured" and result.enqueued is False
    assert len(records(data_dir)) == 20
    # The one timing check the issue asks for: the median, with the first (failing) publish in.
    assert statistics.median(latencies) < BROKER_DOWN_BUDGET_MS, latencies
    assert any(getattr(r, "action", None) == "enqueue_failed" for r in caplog.records)
    assert SECRET not in caplog.text and CONTENT not in caplog.text


@pytest.mark.parametrize("inline", [False, True], ids=["hint-thread", "inline"])
def test_with_a_key_and_a_live_broker_the_hint_goes_to_the_conversations_partition(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str, inline: bool
) -> None:
    import redis

    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    (config_dir / SECRETS_FILE).write_text(json.dumps({"api-key": SECRET}), encoding="utf-8")
    with Host(config_dir=config_dir, data_dir=data_dir, inline_hints=inline) as host:
        result = host.capture(run_event())
        assert host.hints_published == 1
    assert result.enqueued is True and result.hint == "published"
    client = redis.Redis.from_url(redis_url)
    try:
        queue = routing.deliver_queue("c-42", 8)
        [raw] = client.lrange(queue, 0, -1)
        message = json.loads(raw)
        assert message["headers"]["task"] == "memhoncho.deliver"
        assert json.loads(__import__("base64").b64decode(message["body"]))[0] == ["c-42"]
        assert SECRET.encode() not in raw and b"hello" not in raw  # a hint, never data
    finally:
        client.close()


def test_a_key_written_after_the_host_started_applies_at_the_next_capture(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        assert host.capture(run_event("r-1")).enqueued is False
        (config_dir / SECRETS_FILE).write_text(json.dumps({"api-key": SECRET}), encoding="utf-8")
        assert host.capture(run_event("r-2")).enqueued is True


def test_threads_capturing_at_once_each_get_their_line_and_their_hint(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    results: list[Any] = []
    with Host(config_dir=config_dir, data_dir=data_dir) as host:

        def capture_some(thread: int) -> None:
            for i in range(25):
                conversation = "c-shared" if i % 2 else f"c-{thread}"
                results.append(host.capture(run_event(f"t{thread}-{i}", conversation)))

        threads = [threading.Thread(target=capture_some, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(results) == 200
    assert all(r.status == "captured" and r.enqueued for r in results)
    layout = Layout(data_dir)
    stored = [r for key in layout.conversation_keys() for r in Outbox(layout).read(key).records]
    assert len(stored) == len({r["batch_id"] for r in stored}) == 200


def _capture_in_child(host: Host, answers: Any) -> None:
    answers.put(host.capture(run_event("r-child")).enqueued)


def test_a_host_inherited_by_a_forked_child_still_publishes_its_hints(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        assert host.capture(run_event("r-parent")).enqueued  # the hint pool is running now
        deployment = multiprocessing.get_context("fork")
        answers = deployment.Queue()
        child = deployment.Process(target=_capture_in_child, args=(host, answers), daemon=True)
        child.start()
        child.join(timeout=60)
        if child.exitcode is None:  # never leave a stuck child for pytest's exit to wait on
            child.kill()
            child.join()
        assert child.exitcode == 0
        assert answers.get(timeout=5) is True
        answers.close()
        answers.join_thread()
        assert host.capture(run_event("r-parent-2")).enqueued
    assert [r["run_id"] for r in records(data_dir)] == ["r-parent", "r-child", "r-parent-2"]


# ---- processes -----------------------------------------------------------------------------

PROCESSES = 8
CAPTURES_PER_PROCESS = 2000


def _capture_many(config: str, data: str, worker: int, count: int) -> None:
    with Host(config_dir=config, data_dir=data) as host:
        for i in range(count):
            # Half into one shared conversation, half into the worker's own.
            conversation = "shared" if i % 2 else f"own-{worker}"
            result = host.capture(
                run_event(
                    f"w{worker}-r{i}", conversation, inputs=[{"entry_id": i, "text": f"t{i}"}]
                )
            )
            assert result.status == "captured"


@pytest.mark.slow
def test_eight_processes_capturing_concurrently_write_exactly_every_line(
    config_dir: Path, data_dir: Path
) -> None:
    deployment = multiprocessing.get_context("fork")
    workers = [
        deployment.Process(
            target=_capture_many, args=(str(config_dir), str(data_dir), w, CAPTURES_PER_PROCESS)
        )
        for w in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
    for worker in workers:
        if worker.exitcode is None:  # stuck: kill it rather than hang pytest's exit
            worker.kill()
            worker.join()
    assert [w.exitcode for w in workers] == [0] * PROCESSES
    layout = Layout(data_dir)
    lines = 0
    batches: set[str] = set()
    for key in layout.conversation_keys():
        data = layout.outbox(key).read_bytes()
        assert data.endswith(b"\n")
        raws = data.split(b"\n")[:-1]
        records = [decode_line(raw) for raw in raws]
        assert all(records), key
        seqs = [r["seq"] for r in records if r]
        assert seqs == sorted(set(seqs)), key  # strictly growing within a conversation
        lines += len(raws)
        batches.update(r["batch_id"] for r in records if r)
    assert lines == len(batches) == PROCESSES * CAPTURES_PER_PROCESS
    assert sorted(layout.conversation_keys()) == sorted(
        [ids.conversation_key("shared")]
        + [ids.conversation_key(f"own-{w}") for w in range(PROCESSES)]
    )
    assert not layout.quarantine_dir.exists()


KILL_CYCLES = 200
KILL_AFTER_S = (0.0, 0.02)  # a random delay in this range, then SIGKILL


def _capture_until_killed(host: Host, cycle: int, report: int) -> None:
    rng = random.Random(cycle)
    i = 0
    while True:
        # Mostly small runs, some big ones, so a kill often lands inside a write.
        size = rng.choice([10, 200, 5_000, 200_000, 900_000])
        text = "k" * size
        result = host.capture(
            run_event(f"c{cycle}-r{i}", "killed", inputs=[{"entry_id": i, "text": text}])
        )
        os.write(report, f"{result.batch_id}\n".encode())  # reported only after it returned
        i += 1


@pytest.mark.slow
def test_a_capture_that_returned_survives_sigkill_of_its_process(
    config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_message_length=25_000)
    host = Host(config_dir=config_dir, data_dir=data_dir)  # inherited by each child
    layout = Layout(data_dir)
    key = ids.conversation_key("killed")
    outbox = Outbox(layout)
    rng = random.Random(7)
    reported_total = torn_total = 0
    for cycle in range(KILL_CYCLES):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: capture until killed
            os.close(read_end)
            try:
                _capture_until_killed(host, cycle, write_end)
            finally:
                os._exit(1)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            # The kill lands at a random point after the first capture returned, so every
            # cycle does real work however loaded the machine is (a fixed delay did not).
            try:
                first = _first_line(pipe, timeout_s=30.0)
                time.sleep(rng.uniform(*KILL_AFTER_S))
            finally:
                os.kill(pid, signal.SIGKILL)  # never leave a capturing child behind
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            reported = [line.decode() for line in (first + pipe.read()).splitlines()]
        quarantined_before = _quarantine_lines(layout, key)
        stored = Counter(r["batch_id"] for r in outbox.read(key).records)
        torn_total += _quarantine_lines(layout, key) - quarantined_before
        for batch in reported:
            assert stored[batch] == 1, (cycle, batch)
        assert all(count == 1 for count in stored.values())
        data = layout.outbox(key).read_bytes() if layout.outbox(key).exists() else b""
        assert not data or data.endswith(b"\n")
        reported_total += len(reported)
        outbox.rewrite(key, keep=lambda r: False)  # compact, so the file stays small
    host.close()
    assert reported_total > KILL_CYCLES  # the loop did real work, not just fork and die
    print(f"{reported_total} captures reported, {torn_total} torn tails recovered")


def _first_line(pipe: BinaryIO, timeout_s: float) -> bytes:
    """The child's first report line (its first capture returned), byte by byte: no read-ahead."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, "the capturing child reported nothing in time"
        byte = os.read(pipe.fileno(), 1)
        assert byte, "the capturing child died before its first capture returned"
        got += byte
    return got


def _quarantine_lines(layout: Layout, key: str) -> int:
    path = layout.quarantine(key)
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def test_capture_errors_are_all_memhoncho_errors() -> None:
    for cls in (InvalidEvent, InvalidId, CaptureTooLarge, OutboxCapacity):
        assert issubclass(cls, MemhonchoError)
