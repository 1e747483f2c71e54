"""Many records of one conversation appended under one lock with ONE fsync: the import's way.

The same rules as ``Outbox.append`` record by record (a known batch is a duplicate, other
content under a known run id a RunConflict, the pending ceiling, the line ceiling), each
answered per record; then every accepted line is written at once and fsynced once. The
durability promise holds per batch: when ``append_batch`` returns, all its accepted records
are on disk; a crash before leaves none of them (a torn tail is quarantined as always).
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Sequence

from memhoncho.errors import InvalidInput, OutboxCapacity, StoreError
from memhoncho.models import Record
from memhoncho.store.atomic import fsync_dir
from memhoncho.store.lines import encode_line
from memhoncho.store.locks import file_lock
from memhoncho.store.outbox import (
    Appended,
    Outbox,
    _open_for_append,
    _too_large,
    run_conflict,
)

#: per record: what became of it, or why it was refused (nothing of it written)
Outcome = Appended | InvalidInput | OutboxCapacity


def append_batch(
    outbox: Outbox,
    key: str,
    records: Sequence[Record],
    *,
    max_pending: int,
    delivered_seq: Callable[[], int],
    delivered_before: Callable[[str], bool],
    delivered_digest: Callable[[str], str | None],
    max_bytes: int | None = None,
    after_write: Callable[[], object] | None = None,
) -> list[Outcome]:
    """Append the records in order with one write and one fsync; one outcome per record."""
    path, lock = outbox._files(key)  # noqa: SLF001
    outcomes: list[Outcome] = []
    with file_lock(lock):
        fd, created = _open_for_append(path)
        wrote = False
        try:
            tail = outbox._current_tail(key, fd)  # noqa: SLF001
            if tail is None:  # the file was repaired: append to the new one
                os.close(fd)
                fd = -1
                fd, _ = _open_for_append(path)
                tail = outbox._current_tail(key, fd)  # noqa: SLF001
                if tail is None:
                    raise StoreError("the outbox changed while it was being repaired")
            floor = delivered_seq()  # one ledger read per batch
            pending = len(tail.seqs) - bisect.bisect_right(tail.seqs, floor)
            last_seq = max(tail.last_seq, floor)
            known = dict(tail.batch_ids)
            accepted: list[tuple[Record, bytes]] = []
            for record in records:
                outcome = _one(record, known, delivered_before, delivered_digest)
                if outcome is None and pending >= max_pending:
                    outcome = OutboxCapacity(
                        f"the conversation has {pending} undelivered batches; "
                        f"the limit is {max_pending}",
                        limit=max_pending,
                    )
                if outcome is None:
                    seq = max(last_seq + 1, time.time_ns() // 1000)
                    stored: Record = {**record, "seq": seq}
                    line = encode_line(stored)
                    if max_bytes is not None and len(line) > max_bytes:
                        outcome = _too_large(len(line), max_bytes)
                    else:
                        accepted.append((stored, line))
                        known[record["batch_id"]] = record.get("digest")
                        last_seq, pending = seq, pending + 1
                        outcome = Appended(duplicate=False, seq=seq)
                outcomes.append(outcome)
            if accepted:
                outbox._write_all(  # noqa: SLF001
                    fd, b"".join(line for _, line in accepted), tail.size, after_write
                )
                wrote = True
                tail.advance(accepted)
        finally:
            if fd >= 0:
                os.close(fd)
            if created and not wrote:
                path.unlink(missing_ok=True)
                outbox._tails.pop(key, None)  # noqa: SLF001
        if created and wrote:
            fsync_dir(path.parent)
    return outcomes


def _one(
    record: Record,
    known: dict[str, str | None],
    delivered_before: Callable[[str], bool],
    delivered_digest: Callable[[str], str | None],
) -> Outcome | None:
    """A duplicate or a conflict, or None: the record is new."""
    batch_id = record["batch_id"]
    if batch_id in known:
        conflict = run_conflict(known[batch_id], record)
        return conflict if conflict is not None else Appended(duplicate=True)
    if delivered_before(batch_id):
        conflict = run_conflict(delivered_digest(batch_id), record)
        return conflict if conflict is not None else Appended(duplicate=True)
    return None
