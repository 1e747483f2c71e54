"""A taken hint mark is set aside and claimed again by a rename (store/hint_marks.py).

Creating the mark cost an inode allocation on every capture that publishes; the spare keeps
the claim to a touch and a rename. What must still hold: of claims made at once exactly one
publishes, a mark's time is its claim's, a mark's time never goes back for a reader that
remembers it, and nothing of a purged conversation stays behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memhoncho.store import hint_marks
from memhoncho.store.files import FileStore
from memhoncho.store.layout import Layout

COARSE_CLOCK_S = 0.02  # the kernel stamps mtimes from a clock up to a tick behind time.time()


def test_a_taken_mark_is_set_aside_and_the_next_claim_takes_it_back(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    mark, spare = hint_marks.mark_path(layout, "c1"), hint_marks.spares_dir(layout) / "c1"
    assert hint_marks.claim(layout, "c1")  # the first mark is created
    inode = mark.stat().st_ino
    hint_marks.taken(layout, "c1")
    assert not mark.exists() and spare.stat().st_ino == inode
    assert hint_marks.marks(layout) == {}  # a spare is no waiting hint
    assert hint_marks.claim(layout, "c1") is True
    assert mark.stat().st_ino == inode and not spare.exists()
    assert hint_marks.claim(layout, "c1") is False  # waiting: coalesced


def test_a_claim_from_the_spare_dates_the_mark_now(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    hint_marks.claim(layout, "c1")
    hint_marks.taken(layout, "c1")
    old = time.time() - 3600
    os.utime(hint_marks.spares_dir(layout) / "c1", (old, old))
    before = time.time() - COARSE_CLOCK_S
    assert hint_marks.claim(layout, "c1")
    assert hint_marks.mark_path(layout, "c1").stat().st_mtime >= before
    assert hint_marks.stale(layout) == []  # not presumed lost: its hint was just published


def test_a_claim_that_loses_the_spare_to_another_finds_the_mark_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claims after a take, the second moving the spare between the first's touch and
    its rename: the second publishes, the first coalesces on its mark."""
    layout = Layout(tmp_path)
    hint_marks.claim(layout, "c1")
    hint_marks.taken(layout, "c1")
    rename = os.rename
    second: list[bool] = []

    def raced(source: str, target: str) -> None:
        if not second:
            monkeypatch.setattr(hint_marks.os, "rename", rename)
            second.append(hint_marks.claim(layout, "c1"))
        rename(source, target)

    monkeypatch.setattr(hint_marks.os, "rename", raced)
    assert hint_marks.claim(layout, "c1") is False
    assert second == [True]
    assert hint_marks.mark_path(layout, "c1").exists()


def test_a_claim_whose_spare_was_claimed_and_taken_meanwhile_makes_a_new_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim finds no mark; before it touches the spare another claim moves it, and before
    it creates the mark that one's delivery sets it aside: the claim creates a new mark and
    publishes, and the conversation then has a mark and a spare, which the next take joins."""
    layout = Layout(tmp_path)
    hint_marks.claim(layout, "c1")
    hint_marks.taken(layout, "c1")
    utime, open_ = os.utime, os.open

    def claimed_meanwhile(path: str, *args: object) -> None:
        monkeypatch.setattr(hint_marks.os, "utime", utime)
        assert hint_marks.claim(layout, "c1") is True
        utime(path, *args)  # type: ignore[arg-type]

    def taken_meanwhile(path: str, *args: object) -> int:
        monkeypatch.setattr(hint_marks.os, "open", open_)
        hint_marks.taken(layout, "c1")
        return open_(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(hint_marks.os, "utime", claimed_meanwhile)
    monkeypatch.setattr(hint_marks.os, "open", taken_meanwhile)
    assert hint_marks.claim(layout, "c1") is True  # the other's hint was taken: publish
    assert (hint_marks.spares_dir(layout) / "c1").exists()
    assert hint_marks.claim(layout, "c1") is False  # this claim's hint waits
    hint_marks.taken(layout, "c1")
    assert hint_marks.marks(layout) == {}
    assert hint_marks.claim(layout, "c1") is True


def test_a_failed_publish_sets_the_mark_aside_too(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    hint_marks.claim(layout, "c1")
    hint_marks.release(layout, "c1")
    assert hint_marks.marks(layout) == {}
    assert (hint_marks.spares_dir(layout) / "c1").exists()
    assert hint_marks.claim(layout, "c1") is True


def test_a_data_dir_from_before_the_spares_takes_and_claims_as_ever(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    hint_marks.marks_dir(layout).mkdir(parents=True)
    hint_marks.mark_path(layout, "c1").touch()  # a mark an older version made; no spares dir
    hint_marks.taken(layout, "c1")
    assert hint_marks.marks(layout) == {}
    assert hint_marks.claim(layout, "c1") is True


def test_a_reader_that_remembers_a_mark_never_sees_its_time_go_back(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    reader = hint_marks.MarkTimes(layout)
    hint_marks.claim(layout, "c1")
    first = reader.read(fresh_after=0.0)["c1"]
    hint_marks.taken(layout, "c1")
    hint_marks.claim(layout, "c1")  # the same inode, back under the mark's name
    actual = hint_marks.mark_path(layout, "c1").stat().st_mtime
    assert reader.read(fresh_after=first)["c1"] == first <= actual  # remembered: a lower bound
    assert reader.read(fresh_after=actual + 1)["c1"] == actual  # too old to trust: stat-ed


def test_a_purged_conversation_leaves_neither_mark_nor_spare(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    store = FileStore(layout)
    hint_marks.claim(layout, "c1")
    hint_marks.taken(layout, "c1")
    hint_marks.claim(layout, "c2")
    store.remove_outbox("c1")
    store.remove_outbox("c2")
    assert hint_marks.marks(layout) == {}
    assert list(hint_marks.spares_dir(layout).iterdir()) == []
