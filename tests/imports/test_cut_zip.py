"""A ChatGPT export zip cut short (a download that stopped) imports what came before the cut
and says where it broke, as a ``conversations.json`` cut short does; the whole download, later,
stores only the rest. Zips shaped like the real export (``chat.html`` before
``conversations.json``, ``user.json`` after), written both ways a zip is written: with the
sizes in each entry's header (a file) and with them after the data (a stream)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_import_command import memhoncho, summary_of

from memhoncho.deployment import Deployment
from memhoncho.errors import ImportUnreadable
from memhoncho.imports import cut_zip, source
from memhoncho.imports.model import Conversation
from memhoncho.testing import exports

CONVERSATIONS = 30
TURNS = 2


class _Stream(io.RawIOBase):
    """A write-only stream: ``zipfile`` then puts each entry's sizes after its data."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.data += bytes(b)
        return len(b)


def export_zip(path: Path, tmp_path: Path, *, streamed: bool) -> Path:
    conversations = exports.write_array(
        tmp_path / "conversations.json",
        [exports.chatgpt_conversation(c, TURNS) for c in range(CONVERSATIONS)],
    )
    members = {
        "chat.html": ("<html>" + "<p>a page of the same chats</p>" * 3000 + "</html>").encode(),
        "conversations.json": conversations.read_bytes(),
        "user.json": json.dumps({"id": "user-1", "email": "ana@example.com"}).encode(),
    }
    target: Any = _Stream() if streamed else path.open("wb")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    if streamed:
        path.write_bytes(bytes(target.data))
    else:
        target.close()
    return path


def data_range(path: Path, name: str) -> tuple[int, int]:
    """Where the entry's compressed data starts and ends in the whole zip."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    header = path.read_bytes()[info.header_offset : info.header_offset + 30]
    name_length, extra_length = (
        int.from_bytes(header[26:28], "little"),
        int.from_bytes(header[28:30], "little"),
    )
    start = info.header_offset + 30 + name_length + extra_length
    return start, start + info.compress_size


@pytest.mark.parametrize("streamed", [False, True], ids=["sizes-in-headers", "streamed"])
def test_a_cut_zip_reads_its_conversations_json_up_to_the_cut(
    tmp_path: Path, streamed: bool
) -> None:
    whole = export_zip(tmp_path / "export.zip", tmp_path, streamed=streamed)
    assert bool(zipfile.ZipFile(whole).infolist()[0].flag_bits & 0x08) == streamed
    expected = zipfile.ZipFile(whole).read("conversations.json")
    with whole.open("rb") as handle:  # the whole zip, read from its local headers alone
        member = cut_zip.find(handle, lambda name: name == "conversations.json")
        assert member is not None and member.read() == expected
        assert member.read(1) == b""  # its end is the deflated stream's own
    start, end = data_range(whole, "conversations.json")
    cut = tmp_path / "cut.zip"
    cut.write_bytes(whole.read_bytes()[: (start + end) // 2])
    with cut.open("rb") as handle:
        member = cut_zip.find(handle, lambda name: name == "conversations.json")
        assert member is not None
        got = bytearray()
        with pytest.raises(EOFError):
            while chunk := member.read(1000):
                got += chunk
    assert 0 < len(got) < len(expected) and expected.startswith(bytes(got))


@pytest.mark.parametrize("streamed", [False, True], ids=["sizes-in-headers", "streamed"])
def test_a_cut_download_imports_what_came_before_and_the_whole_one_adds_only_the_rest(
    deployment: Deployment, tmp_path: Path, streamed: bool
) -> None:
    whole = export_zip(tmp_path / "export.zip", tmp_path, streamed=streamed)
    start, end = data_range(whole, "conversations.json")
    cut = tmp_path / "export-cut.zip"
    cut.write_bytes(whole.read_bytes()[: start + (end - start) * 2 // 3])

    done = memhoncho(deployment, str(cut), "--json")
    assert done.returncode == 1, done.stderr  # a part broken: said, the rest imported
    summary = summary_of(done)
    assert summary["format"] == "chatgpt"
    captured = summary["totals"]["captured"]
    assert 0 < captured < CONVERSATIONS * TURNS and summary["totals"]["broken"] == 1
    (broken,) = summary["broken"]
    assert broken["where"] == f"after conversation {captured // TURNS - 1}"
    assert "EOFError" in broken["reason"]

    again = memhoncho(deployment, str(cut), "--json")
    assert summary_of(again)["totals"] == {"duplicate": captured, "broken": 1}
    rest = memhoncho(deployment, str(whole), "--json")
    assert rest.returncode == 0, rest.stderr
    assert summary_of(rest)["totals"] == {
        "duplicate": captured,
        "captured": CONVERSATIONS * TURNS - captured,
    }


def test_a_zip_cut_before_its_conversations_json_is_refused_with_nothing_stored(
    deployment: Deployment, tmp_path: Path
) -> None:
    whole = export_zip(tmp_path / "export.zip", tmp_path, streamed=True)
    start, end = data_range(whole, "chat.html")
    cut = tmp_path / "export-cut.zip"
    cut.write_bytes(whole.read_bytes()[: (start + end) // 2])
    done = memhoncho(deployment, str(cut))
    assert done.returncode == 2
    refusal = json.loads(done.stderr)
    assert refusal["code"] == "ERR_IMPORT_UNREADABLE"
    assert "cut short before its conversations.json" in refusal["message"]
    assert not list((deployment.data_dir / "outbox").glob("*.jsonl"))


@pytest.mark.parametrize("streamed", [False, True], ids=["sizes-in-headers", "streamed"])
def test_wherever_the_download_stops_the_conversations_read_are_the_whole_ones_before_it(
    tmp_path: Path, streamed: bool
) -> None:
    whole = export_zip(tmp_path / "export.zip", tmp_path, streamed=streamed)
    everything = [c.conversation_id for c in source.read(whole, "chatgpt")]
    assert len(everything) == CONVERSATIONS
    data = whole.read_bytes()
    _, conversations_end = data_range(whole, "conversations.json")
    cut = tmp_path / "cut.zip"
    counts = []
    for at in range(0, len(data), max(1, len(data) // 97)):
        cut.write_bytes(data[:at])
        try:
            items = list(source.read(cut, "chatgpt"))
        except ImportUnreadable:  # cut before conversations.json's data
            continue
        read = [i.conversation_id for i in items if isinstance(i, Conversation)]
        assert read == everything[: len(read)], at
        if at < conversations_end:
            assert isinstance(items[-1], source.Broken), at
        else:
            assert read == everything, at
        counts.append(len(read))
    # Every conversation whole before the cut is read, not only those before the last buffer.
    assert counts == sorted(counts) and len(set(counts)) > CONVERSATIONS * 3 // 4
