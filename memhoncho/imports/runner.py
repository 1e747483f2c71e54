"""An import: read the export, turn each conversation into runs, capture them (or, dry, count
what would be), and sum it up.

Runs are captured in batches (``capture.batch``: every rule of ``Host.capture``, validation,
redaction, ``duplicate`` for a run already stored; one fsync per conversation's batch, durable
before the next batch is read): importing the
same export again stores nothing new, a longer export only the runs that are new, and an
import killed half-way is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memhoncho.errors import ForkRefused, InvalidInput, MemhonchoError
from memhoncho.imports import progress as progress_file
from memhoncho.imports import source
from memhoncho.imports.extent import Extent
from memhoncho.imports.model import Conversation, Run
from memhoncho.models import CaptureStatus, parse_happened_at

if TYPE_CHECKING:
    from memhoncho.capture.host import Host
    from memhoncho.store.base import Store

BATCH_RUNS = 500  # runs of one conversation written with one fsync


@dataclass(frozen=True)
class Options:
    owner: str | None = None
    since: datetime | None = None  #: runs that happened before are left out
    limit: int | None = None  #: conversations read at most
    conversation_prefix: str = ""  #: put before every conversation id
    dry_run: bool = False


#: broken parts named in a summary (a hostile file of a million broken lines is counted, and
#: its first ones named, in bounded memory)
MAX_BROKEN_LISTED = 100


@dataclass
class Summary:
    """What an import did: totals, each conversation's counts, and what it could not read."""

    path: str
    format: str
    dry_run: bool
    totals: dict[str, int] = field(default_factory=dict)
    conversations: list[dict[str, Any]] = field(default_factory=list)
    broken: list[dict[str, str]] = field(default_factory=list)

    def count(self, what: str, n: int = 1) -> None:
        self.totals[what] = self.totals.get(what, 0) + n

    def counts(self) -> dict[str, Any]:
        """The figures without the per-conversation list (the status view's)."""
        return {
            "path": self.path,
            "format": self.format,
            "conversations": len(self.conversations),
            "totals": dict(self.totals),
            "broken": self.totals.get("broken", 0),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "dry_run": self.dry_run,
            "totals": self.totals,
            "conversations": self.conversations,
            "broken": self.broken,
        }


#: a conversation id -> the batch ids the store already holds for it (outbox or delivered)
Stored = Callable[[str], set[str]]


def stored_batches(store: Store) -> Stored:
    """What a dry run asks the store: the batches a capture would answer ``duplicate`` for,
    those in the outbox and those the ledger's window says were delivered (read only)."""
    from memhoncho import ids

    def batches(conversation_id: str) -> set[str]:
        key = ids.conversation_key(conversation_id)
        found = {str(record["batch_id"]) for record in store.records(key)}
        ledger = store.read_ledger(key)
        if ledger is not None:
            found.update(ledger.delivered_batches)
        return found

    return batches


def run_import(
    host: Host | None,
    path: Path,
    fmt: str | None,
    options: Options,
    progress: Callable[[Summary, Extent], None] | None = None,
    stored: Stored | None = None,
) -> Summary:
    """Import ``path`` (its format detected unless ``fmt``); ``host`` None only when dry.
    ``progress`` is called after each conversation, with how far the export has been read;
    ``stored`` (dry) tells the runs already stored, counted ``duplicate`` as the import would."""
    found = fmt or source.detect(path)
    summary = Summary(str(path), found, options.dry_run)
    record = (
        None if host is None or options.dry_run else progress_file.Recorder(host.deployment.layout)
    )
    read = 0
    extent = Extent()
    for item in source.read(path, found, extent):
        if options.limit is not None and read >= options.limit:
            break
        read += 1
        if isinstance(item, source.Broken):
            if len(summary.broken) < MAX_BROKEN_LISTED:  # counted all, named the first ones
                summary.broken.append({"where": item.where, "reason": item.reason})
            summary.count("broken")
            continue
        summary.conversations.append(_conversation(host, item, options, summary, stored))
        if progress is not None:
            progress(summary, extent)
        if record is not None:
            record(summary.counts())
    if record is not None:
        record(summary.counts(), finished=True)
    return summary


def _conversation(
    host: Host | None,
    conversation: Conversation,
    options: Options,
    summary: Summary,
    stored: Stored | None = None,
) -> dict[str, Any]:
    from memhoncho.capture.record import batch_id

    counts: dict[str, int] = {}

    def count(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1
        summary.count(what)

    prefix = options.conversation_prefix
    if conversation.fork is not None and host is not None and not options.dry_run:
        parent, entry = conversation.fork
        try:  # before the child's first run, so its session begins as the parent's
            host.conversation_forked(prefix + parent, prefix + conversation.conversation_id, entry)
        except ForkRefused:
            pass  # recorded by an earlier import or a hook, or the session already began
    chosen: list[Run] = []
    dry = options.dry_run or host is None
    known = stored(prefix + conversation.conversation_id) if dry and stored else set()
    for run in conversation.runs:
        if options.since is not None and not _since(run, options.since):
            count("before-since")
        elif dry:
            stays = batch_id(prefix + run.conversation_id, run.run_id) in known
            count("duplicate" if stays else "would-capture")
        else:
            chosen.append(run)
    for start in range(0, len(chosen), BATCH_RUNS):
        for answer in _capture(host, chosen[start : start + BATCH_RUNS], options):
            count(answer)
    return {
        "format": conversation.format,
        "conversation_id": prefix + conversation.conversation_id,
        "where": conversation.where,
        "runs": len(conversation.runs),
        **counts,
        "skipped_messages": conversation.skipped,
    }


def _since(run: Run, since: datetime) -> bool:
    if run.happened_at is None:
        return True  # no time: kept (the --since rule says so)
    try:
        return parse_happened_at(run.happened_at) >= since
    except ValueError:
        return True  # refused at capture, with the reason counted there


def _capture(host: Host | None, runs: list[Run], options: Options) -> list[str]:
    """One batch: durable with one fsync (the files) before the next batch is read."""
    from memhoncho.capture.batch import capture_batch

    assert host is not None
    events = []
    for run in runs:
        event = run.event(options.owner)
        event["conversation_id"] = options.conversation_prefix + run.conversation_id
        events.append(event)
    answers = []
    for answer in capture_batch(host, events):
        if isinstance(answer, InvalidInput):  # this run only: the others go on
            answers.append(f"refused:{answer.code}")
        elif isinstance(answer, MemhonchoError):  # the store refused (full): stop, say so
            raise answer
        else:
            answers.append(
                "captured" if answer.status is CaptureStatus.CAPTURED else str(answer.status)
            )
    return answers
