"""Host.capture: durable before it returns, refused without a trace, never slowed by a broker."""

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memhoncho import Host, ids
from memhoncho.capture.record import batch_id
from memhoncho.errors import (
    CaptureTooLarge,
    InvalidEvent,
    InvalidId,
    MemhonchoError,
    OutboxCapacity,
    RunConflict,
)
from memhoncho.models import Ledger
from memhoncho.settings import SECRETS_FILE
from memhoncho.store.layout import Layout
from memhoncho.store.ledger import write_ledger
from memhoncho.store.lines import decode_line
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_settings
from memhoncho.testing.ports import free_port
from memhoncho.worker import routing

SECRET = "sk-secret-0123456789abcdef"
CONTENT = "my-private-diary-entry-xyzzy"
BROKER_DOWN_BUDGET_MS = 50  # the bound for a capture with the broker down


def _run(run_id: str = "r-1", conversation: str = "c-42", **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "conversation_id": conversation,
        "owner": "ana@example.com",
        "run_id": run_id,
        "inputs": [{"entry_id": 17, "text": "hello"}],
        "outcome": {
            "status": "answered",
            "answer": {"entry_id": 18, "content": [{"type": "text", "text": "hi there"}]},
        },
        "selection": None,
    }
    event.update(changes)
    return event


def _snapshot(data_dir: Path) -> dict[str, bytes]:
    """Every durable byte under data/ (locks and the broker's folders aside)."""
    root = data_dir / "data"
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _records(data_dir: Path, conversation: str = "c-42") -> list[dict[str, Any]]:
    return Outbox(Layout(data_dir)).read(ids.conversation_key(conversation)).records


# ---- statuses ----------------------------------------------------------------------------


def test_a_settled_run_is_on_disk_when_capture_returns(host: Host, data_dir: Path) -> None:
    result = host.capture(_run())
    assert result.status == "captured"
    assert result.batch_id == batch_id("c-42", "r-1")
    assert result.enqueued is False  # no API key: nothing is published
    [record] = _records(data_dir)
    assert record["batch_id"] == result.batch_id
    assert record["user_peer_id"] == ids.peer_id("ana@example.com")
    assert [m["role"] for m in record["messages"]] == ["user", "agent"]


def test_capturing_the_same_run_twice_is_a_duplicate_and_writes_nothing(
    host: Host, data_dir: Path, config_dir: Path
) -> None:
    host.capture(_run())
    before = _snapshot(data_dir)
    again = host.capture(_run())
    assert again.status == "duplicate" and again.batch_id == batch_id("c-42", "r-1")
    with Host(config_dir=config_dir, data_dir=data_dir) as other:  # another host process
        assert other.capture(_run()).status == "duplicate"
    assert _snapshot(data_dir) == before


def test_a_run_delivered_and_compacted_away_is_still_a_duplicate(
    host: Host, data_dir: Path
) -> None:
    first = host.capture(_run())
    layout = Layout(data_dir)
    key = ids.conversation_key("c-42")
    [record] = _records(data_dir)
    write_ledger(
        layout,
        key,
        Ledger(
            conversation_id="c-42",
            delivered_seq=record["seq"],
            delivered_batches=[str(first.batch_id)],
        ),
    )
    Outbox(layout).rewrite(key, keep=lambda r: False)
    assert _records(data_dir) == []
    before = _snapshot(data_dir)
    assert host.capture(_run()).status == "duplicate"
    assert _snapshot(data_dir) == before


@pytest.mark.parametrize("selection", [[], ["other-memory"], ["Memhoncho"]])
def test_a_selection_array_without_memhoncho_is_not_selected(
    host: Host, data_dir: Path, selection: list[str]
) -> None:
    assert host.capture(_run(selection=selection)).status == "not-selected"
    assert _snapshot(data_dir) == {}


@pytest.mark.parametrize(
    "selection", [None, ["memhoncho"], {"add": [], "remove": ["memhoncho"]}, {"add": ["x"]}]
)
def test_the_object_form_never_excludes_memhoncho(host: Host, selection: object) -> None:
    assert host.capture(_run(selection=selection)).status == "captured"


def test_a_run_with_nothing_to_deliver_is_empty(host: Host, data_dir: Path) -> None:
    event = _run(
        inputs=[{"entry_id": 1, "text": "   "}],
        outcome={"status": "answered", "answer": {"entry_id": 2, "content": [{"type": "image"}]}},
    )
    assert host.capture(event).status == "empty"
    assert host.capture(_run(inputs=[], outcome={"status": "unanswered"})).status == "empty"
    assert _snapshot(data_dir) == {}


def test_an_unanswered_run_tags_its_inputs_and_carries_no_agent_entry(
    host: Host, data_dir: Path
) -> None:
    host.capture(_run(outcome={"status": "unanswered"}))
    [record] = _records(data_dir)
    assert [(m["role"], m["meta"].get("unanswered")) for m in record["messages"]] == [
        ("user", True)
    ]


def test_an_ownerless_conversation_belongs_to_the_default_user(host: Host, data_dir: Path) -> None:
    host.capture(_run(owner=None))
    assert _records(data_dir)[0]["user_peer_id"] == "user"


def test_a_long_text_is_split_into_parts_with_part_metadata(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_message_length=100)
    host.capture(_run(inputs=[{"entry_id": 1, "text": "x" * 230}]))
    [record] = _records(data_dir)
    users = [m for m in record["messages"] if m["role"] == "user"]
    assert [len(m["text"]) for m in users] == [100, 100, 30]
    assert [(m["meta"]["part"], m["meta"]["parts"]) for m in users] == [(1, 3), (2, 3), (3, 3)]
    assert "".join(m["text"] for m in users) == "x" * 230


def test_a_changed_setting_applies_at_the_next_capture_without_restart(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    host.capture(_run("r-1", inputs=[{"entry_id": 1, "text": "y" * 150}]))
    write_settings(config_dir, max_message_length=100)
    host.capture(_run("r-2", inputs=[{"entry_id": 1, "text": "y" * 150}]))
    first, second = _records(data_dir)
    assert len([m for m in first["messages"] if m["role"] == "user"]) == 1
    assert len([m for m in second["messages"] if m["role"] == "user"]) == 2


# ---- refusals ----------------------------------------------------------------------------


def test_a_run_over_the_byte_ceiling_is_refused_with_the_limit_and_changes_nothing(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    host.capture(_run("r-0"))
    write_settings(config_dir, max_batch_bytes=2048)
    before = _snapshot(data_dir)
    with pytest.raises(CaptureTooLarge) as caught:
        host.capture(_run("r-1", inputs=[{"entry_id": 1, "text": CONTENT * 200}]))
    assert caught.value.code == "ERR_CAPTURE_TOO_LARGE"
    assert "2048" in str(caught.value) and caught.value.details["limit"] == 2048
    assert CONTENT not in str(caught.value) and CONTENT not in json.dumps(caught.value.as_dict())
    assert _snapshot(data_dir) == before
    assert host.capture(_run("r-2")).status == "captured"  # a small run still goes in


def test_a_conversation_at_its_pending_limit_is_refused_with_the_limit_and_changes_nothing(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_pending_batches=3)
    for i in range(3):
        host.capture(_run(f"r-{i}"))
    before = _snapshot(data_dir)
    with pytest.raises(OutboxCapacity) as caught:
        host.capture(_run("r-3", inputs=[{"entry_id": 1, "text": CONTENT}]))
    assert caught.value.code == "ERR_OUTBOX_CAPACITY"
    assert "3" in caught.value.message and caught.value.details["limit"] == 3
    assert CONTENT not in str(caught.value)
    assert _snapshot(data_dir) == before
    assert (
        host.capture(_run("r-0", conversation="c-other")).status == "captured"
    )  # per conversation


@pytest.mark.parametrize(
    "event",
    [
        None,
        42,
        "a run",
        [("conversation_id", "c")],
        {},
        _run(conversation=7),
        _run(run_id=""),
        _run(inputs=[{"entry_id": "17", "text": "x"}]),
        _run(inputs=[{"entry_id": 1, "text": CONTENT.encode()}]),
        _run(inputs={"entry_id": 1, "text": CONTENT}),
        _run(outcome={"status": "answered"}),
        _run(outcome={"status": CONTENT}),
        _run(selection=CONTENT),
        _run(surprise=CONTENT),
        {**_run(), CONTENT + " as a key": 1},
        _run(inputs=[{"entry_id": 1, "text": "a\ud800" + CONTENT}]),
    ],
)
def test_a_malformed_run_is_refused_as_invalid_event_without_echoing_its_content(
    host: Host, data_dir: Path, event: Any
) -> None:
    with pytest.raises(InvalidEvent) as caught:
        host.capture(event)
    assert caught.value.code == "ERR_INVALID_EVENT"
    assert CONTENT not in str(caught.value) and CONTENT not in json.dumps(caught.value.as_dict())
    assert _snapshot(data_dir) == {}


@pytest.mark.parametrize(
    "changes",
    [
        {"conversation_id": ""},
        {"conversation_id": " c"},
        {"conversation_id": "c\x00" + CONTENT},
        {"conversation_id": "x" * 257},
        {"owner": ""},
        {"owner": "o" * 257},
    ],
)
def test_an_unmappable_id_is_refused_as_invalid_id_and_writes_nothing(
    host: Host, data_dir: Path, changes: dict[str, Any]
) -> None:
    with pytest.raises(InvalidId) as caught:
        host.capture(_run(**changes))
    assert CONTENT not in str(caught.value)
    assert _snapshot(data_dir) == {}


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
texts = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="ab \n\ud800", max_size=10),
    st.integers(min_value=1, max_value=3).map(lambda n: "z" * (1500 * n)),
)
fields = {
    "conversation_id": st.one_of(st.text(max_size=12), st.sampled_from(["c-1", "c-2", "../x"])),
    "owner": st.one_of(st.none(), st.text(max_size=12)),
    "run_id": st.one_of(st.sampled_from(["r-1", "r-2", "r-3"]), st.text(max_size=8)),
    "inputs": st.lists(
        st.fixed_dictionaries({"entry_id": st.integers(min_value=-1, max_value=99), "text": texts}),
        max_size=3,
    ),
    "outcome": st.one_of(
        st.just({"status": "unanswered"}),
        st.fixed_dictionaries(
            {
                "status": st.just("answered"),
                "answer": st.fixed_dictionaries(
                    {
                        "entry_id": st.integers(min_value=0, max_value=99),
                        "content": st.lists(
                            st.fixed_dictionaries(
                                {"type": st.sampled_from(["text", "image"]), "text": texts}
                            ),
                            max_size=2,
                        ),
                    }
                ),
            }
        ),
    ),
    "selection": st.one_of(
        st.none(),
        st.lists(st.sampled_from(["memhoncho", "other"]), max_size=2),
        st.fixed_dictionaries({"add": st.lists(st.text(max_size=3), max_size=1)}),
    ),
}
valid_runs = st.fixed_dictionaries(
    {
        "conversation_id": st.from_regex(r"[A-Za-z0-9 .@/_-]{0,10}[a-z]", fullmatch=True),
        "owner": st.one_of(st.none(), st.emails()),
        "run_id": st.text(min_size=1, max_size=12),
        "inputs": st.lists(
            st.fixed_dictionaries(
                {"entry_id": st.integers(min_value=0, max_value=99), "text": texts}
            ),
            min_size=1,
            max_size=3,
        ),
        "outcome": fields["outcome"],
    }
)
events = st.one_of(
    valid_runs,
    valid_runs,
    json_values,
    st.fixed_dictionaries(
        {name: strategy for name, strategy in fields.items() if name != "selection"},
        optional={"selection": fields["selection"]},
    ),
    # a well-shaped run with one field replaced by anything at all (wrong types included)
    st.tuples(st.fixed_dictionaries(fields), st.sampled_from(sorted(fields)), json_values).map(
        lambda t: {**t[0], t[1]: t[2]}
    ),
    st.fixed_dictionaries(fields).map(lambda e: {**e, "extra": 1}),
)


def test_any_event_is_stored_or_refused_with_a_typed_error_and_nothing_written_on_refusal(
    tmp_path: Path,
) -> None:
    config, data = tmp_path / "hc", tmp_path / "hd"
    write_settings(config, max_batch_bytes=4096, max_message_length=1000)
    seen: Counter[str] = Counter()
    with Host(config_dir=config, data_dir=data, init=True) as host:

        @settings(
            max_examples=1000,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(events)
        def check(event: Any) -> None:
            before = _snapshot(data)
            try:
                result = host.capture(event)
            except (InvalidEvent, InvalidId, CaptureTooLarge, RunConflict) as exc:
                seen[exc.code] += 1
                assert _snapshot(data) == before
                return
            seen[result.status] += 1
            after = _snapshot(data)
            if result.status == "captured":
                key = ids.conversation_key(event["conversation_id"])
                batches = [r["batch_id"] for r in host.deployment.store().records(key)]
                assert batches.count(result.batch_id) == 1
                changed = {name for name in after if after[name] != before.get(name)}
                assert changed == {f"outbox/{key}.jsonl"}
            else:
                assert after == before

        check()
    assert sum(seen.values()) >= 1000
    # The strategy reaches every outcome (a guard against a strategy that only makes garbage).
    for outcome in ("captured", "ERR_INVALID_EVENT", "ERR_INVALID_ID", "ERR_CAPTURE_TOO_LARGE"):
        assert seen[outcome] > 0, seen


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
            result = host.capture(_run(f"r-{i}", inputs=[{"entry_id": i, "text": CONTENT}]))
            latencies.append((time.perf_counter() - start) * 1000)
            assert result.status == "captured" and result.enqueued is False
    assert len(_records(data_dir)) == 20
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
        result = host.capture(_run())
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
        assert host.capture(_run("r-1")).enqueued is False
        (config_dir / SECRETS_FILE).write_text(json.dumps({"api-key": SECRET}), encoding="utf-8")
        assert host.capture(_run("r-2")).enqueued is True


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
                results.append(host.capture(_run(f"t{thread}-{i}", conversation)))

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
    answers.put(host.capture(_run("r-child")).enqueued)


def test_a_host_inherited_by_a_forked_child_still_publishes_its_hints(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMHONCHO_BROKER_URL", redis_url)
    monkeypatch.setenv("MEMHONCHO_API_KEY", SECRET)
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        assert host.capture(_run("r-parent")).enqueued  # the hint pool is running now
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
        assert host.capture(_run("r-parent-2")).enqueued
    assert [r["run_id"] for r in _records(data_dir)] == ["r-parent", "r-child", "r-parent-2"]


# ---- processes -----------------------------------------------------------------------------

PROCESSES = 8
CAPTURES_PER_PROCESS = 2000


def _capture_many(config: str, data: str, worker: int, count: int) -> None:
    with Host(config_dir=config, data_dir=data) as host:
        for i in range(count):
            # Half into one shared conversation, half into the worker's own.
            conversation = "shared" if i % 2 else f"own-{worker}"
            result = host.capture(
                _run(f"w{worker}-r{i}", conversation, inputs=[{"entry_id": i, "text": f"t{i}"}])
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
            _run(f"c{cycle}-r{i}", "killed", inputs=[{"entry_id": i, "text": text}])
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
