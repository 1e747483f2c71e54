"""store.peek: an outbox's first and newest records, read from its edges past mark lines,
without reading the whole file (the sweep's index and the newest-record look use it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memhoncho.store import peek
from memhoncho.store.lines import encode_line


def test_the_edges_of_an_outbox_are_its_first_and_last_records(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    mark = encode_line({"seq": 5, "mark": True})
    big = encode_line({"seq": 6, "batch_id": "x", "pad": "y" * 200_000})
    small = encode_line({"seq": 7, "batch_id": "z"})
    end_mark = encode_line({"seq": 9, "mark": True})
    path.write_bytes(mark + big + small + end_mark)
    edges = peek.edges(path)
    assert edges is not None and edges.first is not None and edges.last is not None
    assert (edges.first["seq"], edges.last["seq"]) == (6, 7)
    path.write_bytes(mark)
    assert peek.edges(path) == peek.Edges(None, None, len(mark))
    path.write_bytes(mark + big + small[:-3])
    assert peek.edges(path) is None
    path.write_bytes(mark + big[:100] + b"\n" + small)
    assert peek.edges(path) is None
    assert peek.edges(tmp_path / "absent.jsonl") == peek.Edges(None, None, 0)


def test_the_newest_record_is_read_from_the_end_past_marks(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    mark = encode_line({"seq": 5, "mark": True})
    big = encode_line({"seq": 6, "batch_id": "x", "pad": "y" * 200_000})
    end_mark = encode_line({"seq": 9, "mark": True})
    path.write_bytes(mark + big + end_mark)
    newest = peek.newest(path)
    assert newest is not None and newest["seq"] == 6  # a line longer than one read's chunk
    path.write_bytes(mark)
    assert peek.newest(path) is None
    assert peek.newest(tmp_path / "absent.jsonl") is None
    path.write_bytes(mark + big[:-3])  # torn: the caller repairs (FileStore.newest_record)
    with pytest.raises(peek.Unreadable):
        peek.newest(path)
