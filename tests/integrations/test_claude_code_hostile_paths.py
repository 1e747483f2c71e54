"""A Claude Code hook reads only a regular file: a FIFO named as the transcript never stalls
it (it held the session's lock for 30 s), ``/dev/zero`` never grows it, and a huge line is
passed over in bounded memory; each is a typed error the hook records, the session unharmed."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.errors import ImportUnreadable
from memhoncho.imports import bounded
from memhoncho.imports.claude_code import conversation_id
from memhoncho.integrations.claude_code import handler
from memhoncho.testing.claude_code_transcript import new_session

STALL_GUARD_S = 10.0  # not a measure: a FIFO that blocked would hold the hook past it


def _call(path: str, event: str = "Stop") -> bytes:
    return json.dumps(
        {"hook_event_name": event, "session_id": "s-1", "transcript_path": path, "cwd": "/"}
    ).encode()


@pytest.fixture
def host(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Host(tmp_path / "config", tmp_path / "data", init=True) as running:
        yield running


def test_a_fifo_named_as_the_transcript_is_refused_without_waiting_for_a_writer(
    host: Host, tmp_path: Path
) -> None:
    fifo = tmp_path / "transcript.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            handler.handle(host, _call(str(fifo)), "ana@example.com")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - what the hook would record
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(STALL_GUARD_S)
    assert not thread.is_alive(), "the hook waits on the FIFO"
    assert isinstance(outcome[0], ImportUnreadable)
    assert "not a regular file" in outcome[0].message


def test_a_device_named_as_the_transcript_is_refused_before_a_byte_is_read(host: Host) -> None:
    with pytest.raises(ImportUnreadable, match="not a regular file"):
        handler.handle(host, _call("/dev/zero"), "ana@example.com")


def test_a_transcript_line_past_the_bound_is_passed_over_and_the_turns_after_it_read(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bounded, "MAX_PART_BYTES", 64 * 1024)
    t = new_session(str(tmp_path / "project"), "s-1")
    with open(t.path, "ab") as handle:  # a machine-written line of 1 MB
        handle.write(b'{"type": "user", "message": {"content": "' + b"x" * 1024 * 1024 + b'"}}\n')
    t.write(*t.turn("after the long line", "read it"))
    t.write(*t.turn("and the next", "that too"))
    handler.handle(host, _call(t.path), "ana@example.com")
    key = ids.conversation_key(conversation_id("s-1"))
    texts = [m["text"] for r in host.deployment.store().records(key) for m in r["messages"]]
    assert texts[:2] == ["after the long line", "read it"]
