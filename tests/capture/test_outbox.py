"""The outbox file: durable whole-line appends, torn tails and corrupt lines recovered."""

from __future__ import annotations

import base64
import errno
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memhoncho.errors import OutboxCapacity, StoreError
from memhoncho.store.atomic import append_durably, write_bytes
from memhoncho.store.layout import Layout
from memhoncho.store.lines import decode_line, encode_line, parse
from memhoncho.store.outbox import Outbox

KEY = "c-2d1"


def _record(batch: str, text: str = "hello") -> dict[str, object]:
    return {
        "batch_id": batch,
        "conversation_id": "c-1",
        "messages": [{"id": f"{batch}-0", "role": "user", "entry_id": 1, "text": text, "meta": {}}],
    }


def _append(
    outbox: Outbox,
    batch: str,
    *,
    max_pending: int = 100,
    delivered_seq: int = 0,
    delivered: frozenset[str] = frozenset(),
    text: str = "hello",
) -> object:
    return outbox.append(
        KEY,
        _record(batch, text),
        max_pending=max_pending,
        delivered_seq=lambda: delivered_seq,
        delivered_before=lambda b: b in delivered,
    )


def _batches(outbox: Outbox) -> list[str]:
    return [r["batch_id"] for r in outbox.read(KEY).records]


def _quarantined(layout: Layout) -> list[dict[str, object]]:
    path = layout.quarantine(KEY)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _lines_are_all_valid(path: Path) -> bool:
    data = path.read_bytes()
    return data.endswith(b"\n") and all(decode_line(raw) for raw in data.split(b"\n")[:-1])


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "data")


def test_appended_records_read_back_in_order_with_growing_seqs(layout: Layout) -> None:
    outbox = Outbox(layout)
    for i in range(5):
        assert not _append(outbox, f"b{i}").duplicate
    records = Outbox(layout).read(KEY).records
    assert [r["batch_id"] for r in records] == [f"b{i}" for i in range(5)]
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert _lines_are_all_valid(layout.outbox(KEY))


def test_a_known_batch_is_a_duplicate_and_writes_nothing(layout: Layout) -> None:
    outbox = Outbox(layout)
    _append(outbox, "b1")
    before = layout.outbox(KEY).read_bytes()
    assert _append(outbox, "b1").duplicate
    assert _append(Outbox(layout), "b1").duplicate  # another process sees it in the file
    assert _append(outbox, "b0", delivered=frozenset({"b0"})).duplicate  # delivered, compacted
    assert layout.outbox(KEY).read_bytes() == before


def test_the_pending_limit_refuses_with_the_limit_and_changes_nothing(layout: Layout) -> None:
    outbox = Outbox(layout)
    first = _append(outbox, "b1", max_pending=2)
    _append(outbox, "b2", max_pending=2)
    before = layout.outbox(KEY).read_bytes()
    with pytest.raises(OutboxCapacity) as caught:
        _append(outbox, "b3", max_pending=2)
    assert caught.value.code == "ERR_OUTBOX_CAPACITY"
    assert "2" in caught.value.message and caught.value.details["limit"] == 2
    assert layout.outbox(KEY).read_bytes() == before
    # Once the first is delivered there is room again.
    assert not _append(outbox, "b3", max_pending=2, delivered_seq=first.seq).duplicate  # type: ignore[attr-defined]


@pytest.mark.parametrize("fresh_process", [False, True])
def test_truncating_the_last_line_at_every_offset_recovers_every_complete_record(
    layout: Layout, fresh_process: bool
) -> None:
    writer = Outbox(layout)
    for batch in ("b1", "b2", "b3"):
        _append(writer, batch, text="ünïcode ✓ text")
    path = layout.outbox(KEY)
    whole = path.read_bytes()
    last_start = whole.rstrip(b"\n").rfind(b"\n") + 1
    for offset in range(1, len(whole) - last_start):
        cut = whole[: last_start + offset]
        path.write_bytes(cut)
        layout.quarantine(KEY).unlink(missing_ok=True)
        outbox = Outbox(layout) if fresh_process else writer
        # The next append must land on a line of its own, not glued onto the torn tail.
        assert not _append(outbox, "b4").duplicate
        assert _batches(outbox) == ["b1", "b2", "b4"]
        assert _lines_are_all_valid(path)
        [entry] = _quarantined(layout)
        assert entry["reason"] == "torn"
        assert base64.b64decode(str(entry["raw_b64"])) == cut[last_start:]


def test_a_torn_tail_is_quarantined_by_a_read_and_the_good_lines_stay(layout: Layout) -> None:
    outbox = Outbox(layout)
    _append(outbox, "b1")
    _append(outbox, "b2")
    path = layout.outbox(KEY)
    path.write_bytes(path.read_bytes() + b'0000abcd {"seq":9,"batch')
    assert _batches(Outbox(layout)) == ["b1", "b2"]
    assert [e["reason"] for e in _quarantined(layout)] == ["torn"]
    assert _lines_are_all_valid(path)
    assert layout.quarantine(KEY).parent == layout.root / "data" / "quarantine"


@pytest.mark.parametrize("mask", [0x01, 0x10, 0x80])
def test_a_flipped_byte_quarantines_exactly_that_line(layout: Layout, mask: int) -> None:
    writer = Outbox(layout)
    batches = [f"b{i}" for i in range(4)]
    for batch in batches:
        _append(writer, batch, text="naïve café")
    path = layout.outbox(KEY)
    whole = path.read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(whole) if byte == 0x0A]
    victim = 1  # a line in the middle; the last line is covered by the torn-tail tests
    begin, end = starts[victim], starts[victim + 1]  # end is just past its newline
    for position in range(begin, end):
        damaged = bytearray(whole)
        damaged[position] ^= mask
        path.write_bytes(bytes(damaged))
        layout.quarantine(KEY).unlink(missing_ok=True)
        kept = _batches(Outbox(layout))
        newline_hit = position == end - 1
        expected = batches if newline_hit else [b for b in batches if b != batches[victim]]
        assert kept == expected, position
        quarantined = [base64.b64decode(str(e["raw_b64"])) for e in _quarantined(layout)]
        assert quarantined, position
        for raw in quarantined:  # only bytes of the damaged line (and, at its newline, the next)
            assert raw in bytes(damaged[begin : starts[victim + 2] if newline_hit else end])
        assert _lines_are_all_valid(path)


def test_a_checksum_with_padding_or_a_sign_is_not_a_valid_line() -> None:
    line = encode_line({"seq": 1, "batch_id": "b"})[:-1]
    assert decode_line(line) is not None
    for bad_head in (b" " + line[1:8], b"+" + line[1:8], line[:8].upper()):
        if bad_head != line[:8]:
            assert decode_line(bad_head + line[8:]) is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=6))
def test_garbage_lines_between_good_ones_never_hide_a_good_line(garbage: list[bytes]) -> None:
    good = [encode_line({"seq": i + 1, "batch_id": f"b{i}"}) for i in range(len(garbage) + 1)]
    data = good[0] + b"".join(g + b"\n" + line for g, line in zip(garbage, good[1:], strict=True))
    parsed = parse(data)
    assert [r["batch_id"] for r in parsed.records] == [f"b{i}" for i in range(len(good))]


def test_a_file_replaced_in_place_by_another_process_is_reread_not_trusted(
    layout: Layout,
) -> None:
    """A cached tail must notice a different file behind the same inode (inodes are reused)."""
    host = Outbox(layout)
    _append(host, "b1")
    path = layout.outbox(KEY)
    [seen] = path.read_bytes().splitlines(keepends=True)
    seq = decode_line(seen[:-1])["seq"]  # type: ignore[index]
    # Same inode, and a line of exactly the host's known size in front: only content differs.
    replaced = encode_line({**_record("b9"), "seq": seq + 1})
    assert len(replaced) == len(seen)
    following = encode_line({**_record("b2"), "seq": seq + 2})
    with open(path, "r+b") as handle:
        handle.write(replaced + following)
        handle.truncate()
    assert _append(host, "b9").duplicate
    assert not _append(host, "b10").duplicate
    assert _batches(host) == ["b9", "b2", "b10"]


def test_rewrite_keeps_what_it_is_told_and_seq_never_goes_back(layout: Layout) -> None:
    outbox = Outbox(layout)
    for i in range(3):
        _append(outbox, f"b{i}")
    last = outbox.read(KEY).records[-1]["seq"]
    seen: list[str] = []
    kept, dropped = outbox.rewrite(
        KEY, keep=lambda r: False, before_replace=lambda d: seen.extend(r["batch_id"] for r in d)
    )
    assert kept == [] and [r["batch_id"] for r in dropped] == ["b0", "b1", "b2"] == seen
    assert outbox.read(KEY).last_seq == last  # the mark line keeps the clock
    result = _append(Outbox(layout), "b3")
    assert result.seq > last  # type: ignore[attr-defined]
    assert outbox.pending(KEY, after_seq=last) == outbox.read(KEY).records
    outbox.remove(KEY)
    assert not layout.outbox(KEY).exists() and outbox.read(KEY).records == []


def test_a_failed_write_leaves_no_partial_line(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    outbox = Outbox(layout)
    _append(outbox, "b1")
    before = layout.outbox(KEY).read_bytes()
    real_write = os.write

    def half_then_fail(fd: int, data: bytes) -> int:
        if len(data) > 20:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(StoreError):
        _append(outbox, "b2")
    monkeypatch.undo()
    assert layout.outbox(KEY).read_bytes() == before
    assert not _append(outbox, "b2").duplicate
    assert _batches(outbox) == ["b1", "b2"]


def test_side_file_appends_finish_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    append_durably(tmp_path / "side.jsonl", b'{"a":1}\n{"b":2}\n')
    monkeypatch.undo()
    assert (tmp_path / "side.jsonl").read_bytes() == b'{"a":1}\n{"b":2}\n'


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    write_bytes(path, b"old")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StoreError) as refused:
        write_bytes(path, b"new")
    assert refused.value.code == "ERR_STORE" and refused.value.details["errno"] == "ENOSPC"
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def _no_space(*_: object) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_torn_tail_met_by_a_capture_on_a_full_disk_is_a_store_error_and_loses_nothing(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    outbox = Outbox(layout)
    for batch in ("b1", "b2"):
        _append(outbox, batch)
    path = layout.outbox(KEY)
    torn = path.read_bytes() + b'0000 {"torn'
    path.write_bytes(torn)
    monkeypatch.setattr(os, "write", _no_space)  # the quarantine write meets the full disk
    with pytest.raises(StoreError) as refused:
        _append(Outbox(layout), "b3")
    monkeypatch.undo()
    assert refused.value.code == "ERR_STORE"
    assert path.read_bytes() == torn  # not repaired, not appended: as it was
    assert not _append(Outbox(layout), "b3").duplicate  # room again: repaired, then appended
    assert _batches(outbox) == ["b1", "b2", "b3"]


def test_a_new_conversation_on_a_full_disk_is_a_store_error(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout.outbox(KEY).parent.mkdir(parents=True)
    real_open = os.open

    def no_inode(path: object, flags: int, *args: object) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_inode)
    with pytest.raises(StoreError):
        _append(Outbox(layout), "b1")
