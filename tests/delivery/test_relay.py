"""The outbox relay: records written by a process that published nothing get their hint.

First the relay's scan against a recording publisher; then ``memhoncho run`` (a real worker,
beat and the relay) over real Redis to the stand-in, fed only by ``memhoncho capture``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.capture.relay import Relay
from memhoncho.models import Ledger
from memhoncho.store import hint_marks, stranded
from memhoncho.store.ledger import write_ledger
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.processes import memhoncho_env
from memhoncho.testing.relay import PublishRecorder
from memhoncho.testing.runs import expected_texts, run_event
from memhoncho.worker import queue_depths, routing

KEY = "sk-relay-key"


@pytest.fixture
def quiet_host(config_dir: Path, data_dir: Path) -> Iterator[Host]:
    write_api_key(config_dir, KEY)
    with Host(config_dir, data_dir, hints=False) as host:
        yield host


def test_a_capture_that_publishes_nothing_is_hinted_once_by_the_relay(quiet_host: Host) -> None:
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    assert relay.scan(full=True).published == 0  # nothing captured yet
    assert quiet_host.capture(run_event("conv-1", 0)).enqueued is False
    report = relay.scan(full=False)
    assert (report.requests, report.published) == (1, 1)
    assert relay.scan(full=False).published == 0
    assert relay.scan(full=True).published == 0  # the waiting hint covers the changed outbox
    assert recorder.published == ["conv-1"]


def test_captures_while_the_relays_hint_waits_ask_nothing_until_a_delivery_starts(
    quiet_host: Host,
) -> None:
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    quiet_host.capture(run_event("conv-1", 0))
    relay.scan(full=False)
    for i in range(1, 5):
        quiet_host.capture(run_event("conv-1", i))
    assert relay.scan(full=False).published == 0
    hint_marks.taken(quiet_host.deployment.layout, ids.conversation_key("conv-1"))
    quiet_host.capture(run_event("conv-1", 5))
    assert relay.scan(full=False).published == 1
    assert recorder.published == ["conv-1", "conv-1"]


def test_a_request_whose_publish_failed_is_asked_again_and_published_at_the_next_scan(
    quiet_host: Host,
) -> None:
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    quiet_host.capture(run_event("conv-1", 0))
    recorder.fail = True
    assert relay.scan(full=False).published == 0
    recorder.fail = False
    assert relay.scan(full=False).published == 1


def _age_mark(host: Host, conversation_id: str, seconds: float) -> None:
    """Date the conversation's hint mark ``seconds`` back."""
    mark = hint_marks.mark_path(host.deployment.layout, ids.conversation_key(conversation_id))
    then = time.time() - seconds
    os.utime(mark, (then, then))


def test_a_stale_mark_is_published_again_by_the_relay(quiet_host: Host) -> None:
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    quiet_host.capture(run_event("conv-1", 0))
    relay.scan(full=False)
    _age_mark(quiet_host, "conv-1", hint_marks.STALE_S + 1)  # lost (a flushed broker)
    assert relay.scan(full=False).published == 1


def test_a_stale_mark_whose_queue_holds_messages_waits_until_queued_max(
    quiet_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint behind a backlog is not lost (store/stranded.py): the relay leaves it, counted
    as coalesced, while the conversation's queue on the (embedded) broker holds messages, and
    republishes once the mark is older than QUEUED_MAX_S, or once the queue is empty. Such a
    mark is looked at again after STALE_S, not at every look (a backlog of thousands)."""
    asked: list[object] = []
    real_read = queue_depths.read
    monkeypatch.setattr(queue_depths, "read", lambda *a: asked.append(a) or real_read(*a))
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    quiet_host.capture(run_event("conv-1", 0))
    relay.scan(full=False)
    assert quiet_host.enqueue_delivery("conv-1")  # the hint, waiting in its queue
    _age_mark(quiet_host, "conv-1", hint_marks.STALE_S + 1)
    report = relay.scan(full=True)
    assert (report.published, report.coalesced, len(asked)) == (0, 1, 1)
    assert relay.scan(full=False).published == 0 and len(asked) == 1  # not again so soon
    _age_mark(quiet_host, "conv-1", stranded.QUEUED_MAX_S + 1)
    assert relay.scan(full=False).published == 1
    assert recorder.published == ["conv-1", "conv-1"]


def test_a_stale_mark_is_republished_when_its_queue_is_empty_though_others_are_busy(
    quiet_host: Host,
) -> None:
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    partitions = quiet_host.deployment.settings().partitions
    other = next(
        f"conv-{n}"
        for n in range(2, 100)
        if routing.deliver_queue(f"conv-{n}", partitions)
        != routing.deliver_queue("conv-1", partitions)
    )
    quiet_host.capture(run_event("conv-1", 0))
    relay.scan(full=False)
    assert quiet_host.enqueue_delivery(other)  # another queue is busy, not conv-1's
    _age_mark(quiet_host, "conv-1", hint_marks.STALE_S + 1)
    assert relay.scan(full=False).published == 1


@pytest.fixture
def keyless_host(config_dir: Path, data_dir: Path) -> Iterator[Host]:
    """Captures that ask for no hint (no API key yet): only the full scan finds them."""
    with Host(config_dir, data_dir) as host:
        yield host


def test_the_full_scan_hints_a_changed_outbox_with_a_pending_record_once(
    keyless_host: Host,
) -> None:
    recorder = PublishRecorder()
    relay = Relay(keyless_host.deployment, recorder)
    keyless_host.capture(run_event("conv-1", 0))
    assert relay.scan(full=False).published == 0
    report = relay.scan(full=True)
    assert (report.changed, report.published) == (1, 1)
    assert relay.scan(full=True).published == 0  # unchanged since
    assert recorder.published == ["conv-1"]


def test_the_full_scan_skips_an_outbox_whose_records_are_all_delivered(
    keyless_host: Host,
) -> None:
    recorder = PublishRecorder()
    keyless_host.capture(run_event("conv-1", 0))
    layout = keyless_host.deployment.layout
    key = ids.conversation_key("conv-1")
    last = keyless_host.deployment.store().records(key)[-1]["seq"]
    write_ledger(layout, key, Ledger(conversation_id="conv-1", delivered_seq=last))
    assert Relay(keyless_host.deployment, recorder).scan(full=True).published == 0


def test_a_full_scan_publish_that_failed_is_tried_again_at_the_next_look(
    keyless_host: Host,
) -> None:
    recorder = PublishRecorder()
    relay = Relay(keyless_host.deployment, recorder)
    keyless_host.capture(run_event("conv-1", 0))
    recorder.fail = True
    assert relay.scan(full=True).published == 0
    recorder.fail = False
    assert relay.scan(full=False).published == 1  # owed, not waiting for the next full scan


# ---- memhoncho run: worker, beat and relay, fed by memhoncho capture ---------------------

READY_TIMEOUT_S = 60.0
DELIVERY_TIMEOUT_S = 60.0  # generous on a loaded machine; about a second when idle


@pytest.mark.slow
def test_memhoncho_run_delivers_records_from_a_capture_command_that_published_nothing(
    config_dir: Path, data_dir: Path, tmp_path: Path, redis_url: str, workspace_id: str
) -> None:
    with HonchoStandIn(api_key=KEY) as standin:
        write_settings(
            config_dir, base_url=standin.url, workspace_id=workspace_id, broker_url=redis_url
        )
        write_api_key(config_dir, KEY)
        env = memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
        log = tmp_path / "run.log"
        with open(log, "wb") as out:
            run = subprocess.Popen(
                [sys.executable, "-m", "memhoncho", "run", "--concurrency", "1"],
                env=env,
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        relays: list[int] = []
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while "ready." not in log.read_text(errors="replace"):
                assert run.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.1)
            relays += _relay_children(run.pid)
            assert len(relays) == 1
            names, runs = ["hook-a", "hook-b"], 3
            for i in range(runs):
                for name in names:
                    done = subprocess.run(
                        [sys.executable, "-m", "memhoncho", "capture"],
                        input=_json(run_event(name, i)),
                        env=env,
                        capture_output=True,
                        timeout=60,
                    )
                    assert done.returncode == 0, done.stderr
                    assert b'"enqueued":false' in done.stdout  # the command published nothing
            deadline = time.monotonic() + DELIVERY_TIMEOUT_S
            while time.monotonic() < deadline and _held(standin, workspace_id) < 2 * runs * 2:
                time.sleep(0.2)
            sessions = {s["id"]: s["messages"] for s in standin.sessions(workspace_id)}
            for name in names:
                texts = [m["content"] for m in sessions[ids.session_id(workspace_id, name)]]
                assert texts == expected_texts(name, runs)
        finally:
            run.send_signal(signal.SIGTERM)
            try:
                _wait_or_cry(run, log)
                # The relay leaves with the worker that started it (before any cleanup kill).
                deadline = time.monotonic() + 10
                while any(_alive(pid) for pid in relays) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not any(_alive(pid) for pid in relays)
            finally:
                try:
                    os.killpg(run.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _wait_or_cry(run: subprocess.Popen[bytes], log: Path, timeout_s: float = 30) -> None:
    """Until ``memhoncho run`` exits after its SIGTERM; past ``timeout_s`` the worker is asked
    for every thread's stack (Celery's SIGUSR1 handler writes them to its log) and the test
    fails with the log's end, so a hung shutdown says where it hung. Seen once, on CI
    (2026-12-07, 85d6c09): no exit within 30 s, the log's last line the warm shutdown's
    tasks, before beat's "Shutting down"; not reproduced in 55 runs, loaded or not."""
    try:
        run.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        size = log.stat().st_size
        run.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while log.stat().st_size == size and time.monotonic() < deadline:
            time.sleep(0.1)  # the stacks are written from the worker's signal handler
        time.sleep(0.5)  # and all of them, not the first line only
        tail = log.read_text(errors="replace")[-12000:]
        raise AssertionError(
            f"memhoncho run did not exit {timeout_s:g} s after SIGTERM:\n{tail}"
        ) from None


def _json(run: object) -> bytes:
    import json

    return json.dumps(run).encode()


def _held(standin: HonchoStandIn, workspace_id: str) -> int:
    return standin.message_count(workspace_id)


def _relay_children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    found = []
    for child in (int(p) for p in text.split()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"relay" in cmdline:
            found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def test_a_stale_mark_is_republished_once_not_on_every_look_while_workers_are_down(
    quiet_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hint_marks, "STALE_S", 0.05)
    recorder = PublishRecorder()
    relay = Relay(quiet_host.deployment, recorder)
    quiet_host.capture(run_event("conv-1", 0))
    relay.scan(full=False)
    for _ in range(4):
        time.sleep(0.1)  # stale again and again: no worker takes the hint
        relay.scan(full=False)
    assert recorder.published == ["conv-1", "conv-1"]  # the request's, then one republish
    quiet_host.capture(run_event("conv-1", 1))  # a capture renews the stale mark and asks
    time.sleep(0.1)
    relay.scan(full=False)
    assert recorder.published == ["conv-1"] * 3
