"""The outbox relay: a small process beside the workers that turns new outbox lines into hints.

A capture made by a process that publishes nothing (``memhoncho capture``, a hook that runs a
command per turn) is durable at once but hinted by no one; the relay sees its outbox file change
(one stat per conversation every ``POLL_S``, the stamps the sweep index uses) and publishes
``memhoncho.deliver`` for each changed conversation that has a pending record, through the same
hint marks as the host (``store/hint_marks.py``), so a hint already waiting is not doubled. It
also republishes for marks gone stale (a lost hint). The relay holds no state worth keeping:
its first scan looks at every outbox, and the sweep remains the backstop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError
from memhoncho.store import hint_marks, peek
from memhoncho.store.ledger import read_ledger
from memhoncho.store.sweep_index import Stamp, outbox_stamps

log = logging.getLogger(__name__)

POLL_S = 0.25  # seconds between scans: a record is hinted within about this long

Publish = Callable[[str], bool]  # conversation id -> whether the hint was published


@dataclass
class ScanReport:
    """What one scan did."""

    changed: int = 0  #: outbox files whose stamp changed since the last scan
    published: int = 0  #: hints published
    coalesced: int = 0  #: pending conversations a waiting hint already covered


class Relay:
    """Scans one data directory's outboxes and hints the conversations with new records."""

    def __init__(self, deployment: Deployment, publish: Publish) -> None:
        self.layout = deployment.layout
        self.publish = publish
        self._stamps: dict[str, Stamp] = {}
        #: conversations whose hint could not be published: tried again every scan
        self._owed: set[str] = set()

    def scan(self) -> ScanReport:
        report = ScanReport()
        stamps = outbox_stamps(self.layout)
        changed = {key for key, stamp in stamps.items() if self._stamps.get(key) != stamp}
        self._stamps = stamps
        report.changed = len(changed)
        stale = set(hint_marks.stale(self.layout)) & stamps.keys()
        for key in sorted(changed | stale | self._owed):
            self._owed.discard(key)
            conversation_id = self._pending(key)
            if conversation_id is None:
                if key in stale:
                    # Safe: a capture written after the look above finds this mark stale
                    # too, so it publishes for itself.
                    hint_marks.release(self.layout, key)
                continue
            if not hint_marks.claim(self.layout, key):
                report.coalesced += 1
                continue
            if self._publish(conversation_id):
                report.published += 1
            else:
                hint_marks.release(self.layout, key)
                self._owed.add(key)
        return report

    def _publish(self, conversation_id: str) -> bool:
        try:
            return bool(self.publish(conversation_id))
        except Exception as exc:  # the broker is down: tried again at the next scan
            log.warning(
                "relay hint not published",
                extra={"action": "relay_publish_failed", "error": type(exc).__name__},
            )
            return False

    def _pending(self, key: str) -> str | None:
        """The conversation id when the outbox holds a record past the ledger's mark."""
        found = peek.edges(self.layout.outbox(key))
        if found is not None and found.last is None:
            return None  # nothing but marks: nothing to deliver
        try:
            ledger = read_ledger(self.layout, key)
        except MemhonchoError:
            ledger = None  # the delivery reports the bad ledger; the hint costs nothing
        delivered = ledger.delivered_seq if ledger is not None else 0
        if found is not None and found.last is not None and found.last["seq"] <= delivered:
            return None
        if ledger is not None:
            return ledger.conversation_id
        record = found.last if found is not None else None
        if record is not None and isinstance(record.get("conversation_id"), str):
            return str(record["conversation_id"])
        return ids.decode(key)  # a torn tail: the delivery repairs it


def run(
    deployment: Deployment,
    publish: Publish,
    *,
    poll_s: float = POLL_S,
    exit_with_parent: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Scan every ``poll_s`` until ``should_stop`` (or, with ``exit_with_parent``, until the
    process that started this one is gone: ``memhoncho run`` starts the relay that way)."""
    parent = os.getppid()
    relay = Relay(deployment, publish)
    log.info("outbox relay started", extra={"action": "relay_started", "poll_s": poll_s})
    while not should_stop():
        started = time.monotonic()
        report = relay.scan()
        if report.published:
            log.debug(
                "relay published hints",
                extra={"action": "relay_scan", "published": report.published},
            )
        if exit_with_parent and os.getppid() != parent:
            return
        time.sleep(max(0.0, poll_s - (time.monotonic() - started)))
