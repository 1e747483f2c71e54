"""The embedded broker: a message appears whole to its consumers, and a bad one never kills them."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue
from kombu.exceptions import ChannelError

from memhoncho.celery_app import embedded_broker
from memhoncho.worker.embedded_broker import TRANSPORT

MESSAGES = 400  # per publisher
PUBLISHERS = 2
DECLARERS = 4  # processes declaring their queue on the same fresh exchanges at once
EXCHANGES = 300  # each one's first table is a race between them


def _connection(data_dir: Path) -> Connection:
    _, options = embedded_broker(data_dir)
    return Connection("filesystem://", transport=TRANSPORT, transport_options=options)


def test_a_consumer_racing_publishers_reads_every_message_whole_and_once(
    data_dir: Path,
) -> None:
    """kombu's own transport lets a consumer take a file before its publisher wrote it."""
    total = PUBLISHERS * MESSAGES

    def publish(offset: int) -> None:
        with _connection(data_dir) as conn:
            queue = conn.SimpleQueue("race")
            for n in range(offset, offset + MESSAGES):
                queue.put({"n": n, "pad": "x" * 4000})
            queue.close()

    publishers = [threading.Thread(target=publish, args=(i * MESSAGES,)) for i in range(PUBLISHERS)]
    received: list[int] = []
    with _connection(data_dir) as conn:
        queue = conn.SimpleQueue("race")
        for thread in publishers:
            thread.start()
        deadline = time.monotonic() + 60
        while len(received) < total and time.monotonic() < deadline:
            try:
                message = queue.get(timeout=0.01)
            except queue.Empty:
                continue
            received.append(message.payload["n"])
            message.ack()
        queue.close()
    for thread in publishers:
        thread.join()
    assert sorted(received) == list(range(total))
    assert not list((data_dir / "broker" / "taken").iterdir())  # nothing left behind


def test_a_message_that_does_not_decode_is_dropped_and_the_next_is_read(data_dir: Path) -> None:
    with _connection(data_dir) as conn:
        queue = conn.SimpleQueue("bad")
        queue_dir = data_dir / "broker" / "queue"
        (queue_dir / "1_00000000-0000-0000-0000-000000000000.bad.msg").write_bytes(b"")
        queue.put({"n": 1})
        assert queue.get(timeout=1).payload == {"n": 1}
        queue.close()


def test_a_binding_declared_for_one_data_dir_is_written_for_the_next_one(tmp_path: Path) -> None:
    """kombu's filesystem transport keeps one process-wide record of declared bindings: the
    second folder's declaration was skipped, and its publishes through the exchange dropped."""
    exchange = Exchange("memhoncho", type="direct")
    for name in ("first", "second"):
        data_dir = tmp_path / name
        with _connection(data_dir) as conn:
            Queue("memhoncho.deliver.1", exchange, routing_key="memhoncho.deliver.1")(
                conn.default_channel
            ).declare()
            conn.Producer().publish({"x": 1}, exchange=exchange, routing_key="memhoncho.deliver.1")
        sent = [p.name for p in (data_dir / "broker" / "queue").iterdir()]
        assert [n.partition(".")[2] for n in sent] == ["memhoncho.deliver.1.msg"], name


def _declare_on_every_exchange(data_dir: Path, queue: str, start: Any) -> None:
    start.wait()
    with _connection(data_dir) as conn:
        for n in range(EXCHANGES):
            exchange = Exchange(f"race{n}", type="direct")
            Queue(queue, exchange, routing_key=queue)(conn.default_channel).declare()


def test_processes_declaring_on_the_same_new_exchanges_at_once_keep_every_binding(
    data_dir: Path,
) -> None:
    """kombu's own transport empties a new table before it locks it: a process starting at the
    same moment read nothing and exited (JSONDecodeError, a CI run of two workers), or a binding
    was overwritten and that queue's hints silently went nowhere."""
    context = multiprocessing.get_context("fork")
    start = context.Event()
    queues = [f"worker{n}" for n in range(DECLARERS)]
    processes = [
        context.Process(target=_declare_on_every_exchange, args=(data_dir, queue, start))
        for queue in queues
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=60)
    assert [process.exitcode for process in processes] == [0] * DECLARERS
    control = data_dir / "broker" / "control"
    for n in range(EXCHANGES):
        table = json.loads((control / f"race{n}.exchange").read_text())
        assert sorted(row[2] for row in table) == queues, n


def test_an_exchange_table_that_does_not_decode_is_rewritten_by_the_next_declaration(
    data_dir: Path,
) -> None:
    control = data_dir / "broker" / "control"
    control.mkdir(parents=True)
    (control / "memhoncho.exchange").write_bytes(b"")  # a crash while an older kombu wrote it
    exchange = Exchange("memhoncho", type="direct")
    with _connection(data_dir) as conn:
        Queue("memhoncho.deliver.1", exchange, routing_key="memhoncho.deliver.1")(
            conn.default_channel
        ).declare()
        conn.Producer().publish({"x": 1}, exchange=exchange, routing_key="memhoncho.deliver.1")
    assert len(list((data_dir / "broker" / "queue").iterdir())) == 1


def test_a_table_that_cannot_be_written_is_a_channel_error_and_leaves_it_as_it_was(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exchange = Exchange("memhoncho", type="direct")
    table = data_dir / "broker" / "control" / "memhoncho.exchange"
    with _connection(data_dir) as conn:
        Queue("memhoncho.deliver.1", exchange, routing_key="memhoncho.deliver.1")(
            conn.default_channel
        ).declare()
        before = table.read_bytes()

        def full_disk(src: object, dst: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "replace", full_disk)
        with pytest.raises(ChannelError):
            Queue("memhoncho.deliver.2", exchange, routing_key="memhoncho.deliver.2")(
                conn.default_channel
            ).declare()
    assert table.read_bytes() == before
    assert sorted(p.name for p in table.parent.iterdir()) == [
        "memhoncho.exchange",
        "memhoncho.exchange.lock",
    ]
