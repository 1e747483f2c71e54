"""The outbox relay: a small process beside the workers that turns new outbox lines into hints.

A capture made by a process that publishes nothing (``memhoncho capture``, a hook that runs a
command per turn) is durable at once and leaves a relay request when no hint is waiting for its
conversation (``store/hint_marks.py``). Every ``POLL_S`` the relay takes the requests and
publishes ``memhoncho.deliver`` for each, and republishes for hint marks gone stale (a lost
hint), once, and only when the conversation's queue is empty (a hint behind a backlog is not
lost: ``store/stranded.py``'s rule): both looks cost a listing of small directories, whatever
the number of conversations, and the broker is asked only when a stale mark has records.
Every ``FULL_SCAN_S`` (and at start) it also stats every outbox (the stamps the sweep index
uses) and hints each changed one with a pending record, through the same marks, so records that
got no hint (no key yet, a broker that was down) wait for it, not for the next sweep.

On the PostgreSQL store those captures leave their request in the database instead (the
capture's own statement, ``memhoncho_relay_requests``), where the relay of any machine takes
it at its next look; the marks are the database's too.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError
from memhoncho.settings import Settings
from memhoncho.store import hint_marks, peek
from memhoncho.store.ledger import read_ledger
from memhoncho.store.modes import make_dirs
from memhoncho.store.relay_watch import HEARTBEAT_STALE_S as HEARTBEAT_STALE_S  # a relay gone
from memhoncho.store.stranded import QUEUED_MAX_S
from memhoncho.store.sweep_index import Stamp, outbox_stamps
from memhoncho.worker.queue_depths import BusyQueues

log = logging.getLogger(__name__)

POLL_S = 0.25  # seconds between looks at the requests: a record is hinted within about this
HEARTBEAT_S = 5.0  # seconds between touches of the relay's heartbeat file
#: seconds between scans of every outbox's stat (one stat each: ~0.1 s at 10k conversations)
FULL_SCAN_S = 30.0

Publish = Callable[[str], bool]  # conversation id -> whether the hint was published


@dataclass
class ScanReport:
    """What one scan did."""

    requests: int = 0  #: relay requests taken
    changed: int = 0  #: outbox files whose stamp changed since the last full scan
    published: int = 0  #: hints published
    coalesced: int = 0  #: pending conversations a waiting hint already covered


class Relay:
    """Scans one data directory's outboxes and hints the conversations with new records."""

    def __init__(self, deployment: Deployment, publish: Publish) -> None:
        self.deployment = deployment
        self.layout = deployment.layout
        self.publish = publish
        #: the settings it last read (``_settings``)
        self.current = deployment.settings()
        #: the requests and marks are the database's (PostgreSQL), not this data directory's
        self.in_database = bool(self.current.store_url)
        self._stamps: dict[str, Stamp] = {}
        self._next_full = 0.0  # monotonic time of the next full scan; the first is at once
        #: stale marks this relay republished, with the mtime it renewed them to
        self._republished: dict[str, float] = {}
        #: conversations whose hint could not be published: tried again every scan
        self._owed: set[str] = set()
        #: stale marks found behind a busy queue: their mtime then, and when (monotonic) to
        #: look at them again
        self._behind: dict[str, tuple[float, float]] = {}

    def scan(self, *, full: bool | None = None) -> ScanReport:
        """Publish for the requests and stale marks; with ``full`` (due every ``FULL_SCAN_S``
        by default), also for every changed outbox with a pending record."""
        if self.in_database:
            return self._scan_database()
        report = ScanReport()
        for key in hint_marks.relay_requests(self.layout):
            conversation_id = hint_marks.take_request(self.layout, key)
            if conversation_id is None:
                continue  # another relay took it
            report.requests += 1
            if self._publish(conversation_id):
                report.published += 1
                hint_marks.renew(self.layout, key)  # its age counts from this publish
            else:  # the mark stays claimed: ask again, so the hint is still owed
                hint_marks.request_relay(self.layout, key, conversation_id)
        if full is None:
            full = time.monotonic() >= self._next_full
        waiting = hint_marks.marks(self.layout)
        now = time.time()
        # A stale mark is republished once; if that hint is lost too, the next capture or the
        # sweep re-drives it. Republishing on every look would pile hints up in the queue of
        # workers that are down, one per conversation every STALE_S.
        # A stale mark whose queue holds messages waits behind a backlog: not lost until
        # QUEUED_MAX_S (store/stranded.py). The broker is asked only if such a mark comes up,
        # and such a mark is looked at again after STALE_S, not at every look.
        busy = BusyQueues(self.deployment, self._settings())
        looked_at = time.monotonic()
        stale = {
            key
            for key, mtime in waiting.items()
            if now - mtime > hint_marks.STALE_S
            and self._republished.get(key) != mtime
            and not self._still_behind(key, mtime, looked_at)
        }
        self._republished = {k: v for k, v in self._republished.items() if k in waiting}
        self._behind = {k: v for k, v in self._behind.items() if k in waiting}
        keys = stale | self._owed
        if full:
            self._next_full = time.monotonic() + FULL_SCAN_S
            stamps = outbox_stamps(self.layout)
            changed = {key for key, stamp in stamps.items() if self._stamps.get(key) != stamp}
            self._stamps = stamps
            report.changed = len(changed)
            keys |= changed
        for key in sorted(keys):
            self._owed.discard(key)
            conversation_id = self._pending(key)
            age = now - waiting.get(key, now)
            if (
                conversation_id is not None
                and hint_marks.STALE_S < age <= QUEUED_MAX_S
                and busy(conversation_id)
            ):
                self._behind[key] = (waiting[key], looked_at + hint_marks.STALE_S)
                report.coalesced += 1  # its hint waits behind others: it covers these lines
                continue
            if conversation_id is None:
                if key in stale:
                    # Safe: a capture written after the look above finds this mark stale
                    # too, so it publishes (or asks the relay) for itself.
                    hint_marks.release(self.layout, key)
                continue
            if not hint_marks.claim(self.layout, key):
                report.coalesced += 1
                continue
            if self._publish(conversation_id):
                report.published += 1
                if key in stale:
                    try:
                        mtime = hint_marks.mark_path(self.layout, key).stat().st_mtime
                    except OSError:
                        continue  # taken already by the delivery it asked for
                    self._republished[key] = mtime
            else:
                hint_marks.release(self.layout, key)
                self._owed.add(key)
        return report

    def _scan_database(self) -> ScanReport:
        """Take the database's requests; publish each whose mark this relay claims (a hint
        that waits covers the others). After a failed publish the rest wait for the next look,
        asked again with it: one failure a look while the broker is down, not one each."""
        report = ScanReport()
        try:
            store: Any = self.deployment.store()
            taken: list[tuple[str, str]] = store.take_relay_requests()
        except MemhonchoError as exc:
            _log_failure(exc)
            return report
        owed: list[tuple[str, str]] = []
        try:
            for key, conversation_id in taken:
                report.requests += 1
                if owed:
                    owed.append((key, conversation_id))
                elif not store.claim_hint(key):
                    report.coalesced += 1
                elif self._publish(conversation_id):
                    report.published += 1
                else:
                    store.release_hint(key)
                    owed.append((key, conversation_id))
        except MemhonchoError as exc:  # the database went away mid-look: ask for the rest
            _log_failure(exc)
            done = report.published + report.coalesced + len(owed)
            owed += taken[done:]
        try:
            store.request_relay(owed)
        except MemhonchoError as exc:  # lost with the database: the sweep re-drives them
            _log_failure(exc)
        return report

    def _settings(self) -> Settings:
        """The live settings, or the last ones read while the file is broken: a relay that is
        serving answers captures with ERR_CONFIG then (``cli/relay.py``), and a look must not
        end it meanwhile."""
        try:
            self.current = self.deployment.settings()
        except MemhonchoError as exc:
            log.debug(
                "settings unreadable: the relay keeps the last it read",
                extra={"action": "relay_settings_unreadable", "code": exc.code},
            )
        return self.current

    def _still_behind(self, key: str, mtime: float, now: float) -> bool:
        """Found behind a busy queue at this mtime, too recently to look again."""
        behind = self._behind.get(key)
        return behind is not None and behind[0] == mtime and now < behind[1]

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
    scanner: Relay | None = None,
) -> None:
    """Scan every ``poll_s`` until ``should_stop`` (or, with ``exit_with_parent``, until the
    process that started this one is gone: ``memhoncho run`` starts the relay that way).

    ``scanner``: the relay, built before: building it reads the settings, which must happen
    before the relay's socket answers anyone (``memhoncho relay``), or settings broken in
    between would end a relay that is already serving."""
    parent = os.getppid()
    relay = scanner or Relay(deployment, publish)
    heartbeat = deployment.layout.relay_heartbeat(socket.gethostname())
    last_beat = 0.0
    log.info("outbox relay started", extra={"action": "relay_started", "poll_s": poll_s})
    while not should_stop():
        started = time.monotonic()
        report = relay.scan()
        if started - last_beat >= HEARTBEAT_S:
            last_beat = started
            _touch(heartbeat)
        if report.published:
            log.debug(
                "relay published hints",
                extra={"action": "relay_scan", "published": report.published},
            )
        if exit_with_parent and os.getppid() != parent:
            return
        time.sleep(max(0.0, poll_s - (time.monotonic() - started)))


def _log_failure(exc: Exception) -> None:
    log.warning(
        "relay could not read its requests",
        extra={"action": "relay_store_failed", "error": type(exc).__name__},
    )


def _touch(path: Path) -> None:
    """The heartbeat: a file's mtime. A failure is logged; the relay keeps relaying."""
    try:
        make_dirs(path.parent)
        path.touch()
    except OSError as exc:
        log.warning(
            "relay heartbeat not written",
            extra={"action": "relay_heartbeat_failed", "error": type(exc).__name__},
        )
