"""Hint marks: one empty file per conversation whose delivery hint is published and not yet taken.

A conversation whose hint still waits in the broker needs no second one, so hints coalesce
without a broker round trip: the publisher (the host after its append, or the outbox relay)
makes ``state/hints/<key>`` (atomically: see the spares below) and publishes only if it made
it; the delivery task removes it when it starts, under the conversation lock and before it
reads the outbox.

Why no record is left behind. A capture writes its line first, then looks for the mark.
- The mark is there: the task that will remove it has not removed it yet, so it reads the
  outbox after the removal, which is after the look, which is after the write. It sees the line.
- The mark is absent (no hint waiting, or a task took it after the write): the capture creates
  it and publishes, so a task that starts after the write exists. A task that took the old
  mark before the write may miss the line; the new hint is the one that delivers it.
- The publish fails: the publisher removes the mark, so the next capture publishes again; the
  relay and the sweep re-drive what is pending meanwhile.
- The hint is lost after it was published (a flushed broker, a worker killed with the message
  unacked): the mark stays. A mark older than ``STALE_S`` counts as absent, so the next capture
  or the relay's scan publishes again; the sweep re-drives in any case.
Marks are not fsynced: a mark lost in a crash costs one extra hint, one that survives is stale.
A delivery's retry claims the mark dated when it is due (``claim(due_in_s=...)``), so a retry
that waits out a long Retry-After is not presumed lost meanwhile; a renewal keeps that date.

A taken mark is not deleted but moved aside (``state/hint-spares/<key>``), and the next claim
touches it and moves it back: a rename, where creating a file allocates an inode, which cost
0.1-0.15 ms of a 0.75 ms capture that publishes on the 2-core machine. Rename is atomic, so of
two claims that move the same spare one succeeds; the other finds the mark waiting. Without a
spare (the conversation's first hint, or one moved meanwhile) a claim creates the mark with
``O_EXCL`` as before.

On the PostgreSQL store the mark is the conversation's ``hint_at`` column instead (hosts and
workers on many machines see one mark): the capture claims it in its own statement
(``memhoncho_append``), under the row lock its commit holds, and a delivery clears it with an
UPDATE that waits on that lock (``Store.take_hint``), so the reasoning above holds row for file.

A capture that publishes nothing itself (``memhoncho capture``) claims the mark the same way and,
when it created it, leaves a relay request (``state/relay/<key>``, holding the conversation id):
the outbox relay takes the request (removes it) and then publishes. The mark stays claimed until
that hint's delivery starts, so the captures in between coalesce on it; a request made after the
relay took the last one is a new file, published at the next look. On the PostgreSQL store the
request is a row of ``memhoncho_relay_requests``, left by the capture's own statement (for a
capture that publishes nothing, or whose broker is down or key missing) when no hint waits;
the relay claims the mark when it takes the request, just before it publishes.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from memhoncho.store.layout import Layout
from memhoncho.store.modes import make_dirs, open_file

#: seconds after which a waiting mark is presumed lost and a new hint is published; longer
#: than a hint waits in a busy queue, short enough that a lost hint costs little
STALE_S = 10.0


def marks_dir(layout: Layout) -> Path:
    return layout.root / "state" / "hints"


def mark_path(layout: Layout, key: str) -> Path:
    return marks_dir(layout) / key


def spares_dir(layout: Layout) -> Path:
    """Where taken marks wait to be claimed again (never listed as marks)."""
    return layout.root / "state" / "hint-spares"


_dirs: dict[Path, tuple[str, str]] = {}  # data dir -> (marks folder, spares folder) as strings


def _files(layout: Layout, key: str) -> tuple[str, str]:
    """The mark and its spare as strings, built without pathlib: claim runs on every capture."""
    folders = _dirs.get(layout.root)
    if folders is None:
        folders = _dirs[layout.root] = (
            os.fspath(marks_dir(layout)),
            os.fspath(spares_dir(layout)),
        )
    return f"{folders[0]}/{key}", f"{folders[1]}/{key}"  # a key is a safe file name


def claim(layout: Layout, key: str, *, now: float | None = None, due_in_s: float = 0.0) -> bool:
    """Whether the caller must publish a hint: True when it made the mark (or found it
    stale and renewed it); False when a hint is waiting and will see what is written now.

    ``due_in_s``: the hint runs that much later (a retry's countdown, a Retry-After), so its
    mark is dated then: it is not presumed lost (``STALE_S``) before it could have run."""
    now = time.time() if now is None else now
    if not _claim(layout, key, now):
        return False
    if due_in_s > 0:
        with contextlib.suppress(OSError):  # an undated mark: an extra hint after STALE_S
            os.utime(mark_path(layout, key), (now + due_in_s, now + due_in_s))
    return True


def _claim(layout: Layout, key: str, now: float) -> bool:
    path, spare = _files(layout, key)
    try:
        return _renew_if_stale(path, now, os.stat(path).st_mtime)
    except FileNotFoundError:
        pass  # no hint waits: make the mark
    except OSError:
        return True  # the mark is an economy; without it, publish every time
    try:
        os.utime(spare)  # the claim's time, before the spare becomes the mark
        os.rename(spare, path)
        return True
    except OSError:
        pass  # no spare (a first hint), or another claim moved it first: create the mark
    for _ in range(2):
        try:
            os.close(open_file(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return _renew_if_stale(path, now)
        except FileNotFoundError:  # the first mark in this data directory
            make_dirs(marks_dir(layout))
        except OSError:
            return True
    return True


def _renew_if_stale(path: str, now: float, mtime: float | None = None) -> bool:
    if mtime is None:
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return True  # taken since: this capture's line needs a hint of its own
        except OSError:
            return True
    if now - mtime <= STALE_S:
        return False
    try:
        os.utime(path)  # two captures may both renew it: one extra hint, nothing worse
    except OSError:
        pass
    return True


def renew(layout: Layout, key: str) -> None:
    """A hint was just published or received for this mark: its age counts from now (a mark
    dated later, a retry's, keeps its date)."""
    path = mark_path(layout, key)
    now = time.time()
    try:
        if os.stat(path).st_mtime < now:
            os.utime(path, (now, now))
    except OSError:
        pass  # gone: taken by a delivery already


def release(layout: Layout, key: str) -> None:
    """The publish failed: no hint waits, so the next capture (or the relay) publishes."""
    _set_aside(layout, key)


def taken(layout: Layout, key: str) -> None:
    """A delivery task starts: captures from now on need (and publish) a hint of their own."""
    _set_aside(layout, key)


def _set_aside(layout: Layout, key: str) -> None:
    """No hint waits any more: the mark becomes the conversation's spare (see the top)."""
    path, spare = _files(layout, key)
    for _ in range(2):
        try:
            os.rename(path, spare)
            return
        except FileNotFoundError:
            if os.path.isdir(os.path.dirname(spare)):
                return  # no mark waits
            try:
                make_dirs(os.path.dirname(spare))
            except OSError:
                break
        except OSError:
            break
    try:
        os.unlink(path)
    except OSError:
        pass  # a mark left behind costs at most a delay of STALE_S, never a record


def forget(layout: Layout, key: str) -> None:
    """The conversation's outbox is gone (an operator's purge): its mark and spare go too."""
    for path in _files(layout, key):
        try:
            os.unlink(path)
        except OSError:
            pass


def marks(layout: Layout) -> dict[str, float]:
    """Every waiting mark and its mtime (when its hint was published or last renewed)."""
    found: dict[str, float] = {}
    try:
        entries = os.scandir(marks_dir(layout))
    except FileNotFoundError:
        return found
    with entries:
        for entry in entries:
            try:
                found[entry.name] = entry.stat().st_mtime
            except FileNotFoundError:
                continue
    return found


class MarkTimes:
    """Every waiting mark's time from one listing, with a stat only where the answer needs it.

    A mark's time only moves forward: it is created now and renewed to now, and a mark taken
    and claimed again is a newer file, or its spare touched before it comes back. So a time
    read earlier under the same name and inode is a lower bound of the mark's time, and while
    that bound is recent enough the mark is fresh whatever it says today: no stat. A mark seen
    for the first time, or one the bound calls stale, is stat-ed (a stale one is about to be
    enqueued again anyway). A listing gives the inode without a stat (``DirEntry.inode``)."""

    def __init__(self, layout: Layout) -> None:
        self.directory = marks_dir(layout)
        self._seen: dict[str, tuple[int, float]] = {}  # key -> (inode, mtime as read)

    def read(self, fresh_after: float) -> dict[str, float]:
        """Each mark's time: exact where it is before ``fresh_after``, else a lower bound that
        is at or after it."""
        seen: dict[str, tuple[int, float]] = {}
        known = self._seen
        try:
            entries = os.scandir(self.directory)
        except FileNotFoundError:
            self._seen = seen
            return {}
        with entries:
            for entry in entries:
                try:
                    inode = entry.inode()
                    cached = known.get(entry.name)
                    if cached is not None and cached[0] == inode and cached[1] >= fresh_after:
                        seen[entry.name] = cached
                    else:
                        seen[entry.name] = (inode, entry.stat().st_mtime)
                except FileNotFoundError:
                    continue  # taken since the listing began
        self._seen = seen
        return {key: at for key, (_, at) in seen.items()}


def stale(layout: Layout, *, now: float | None = None) -> list[str]:
    """The keys whose mark is older than ``STALE_S``: hints presumed lost."""
    now = time.time() if now is None else now
    return sorted(key for key, mtime in marks(layout).items() if now - mtime > STALE_S)


def requests_dir(layout: Layout) -> Path:
    return layout.root / "state" / "relay"


def request_relay(layout: Layout, key: str, conversation_id: str) -> None:
    """Ask the outbox relay to publish this conversation's hint (the caller holds the mark)."""
    path = requests_dir(layout) / key
    for _ in range(2):
        try:
            fd = open_file(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # a request not yet taken: its hint is published after this line was written
        except FileNotFoundError:
            make_dirs(path.parent)
            continue
        try:
            os.write(fd, conversation_id.encode("utf-8"))
        finally:
            os.close(fd)
        return


def relay_requests(layout: Layout) -> list[str]:
    """The keys with a relay request waiting."""
    try:
        return sorted(os.listdir(requests_dir(layout)))
    except FileNotFoundError:
        return []


def take_request(layout: Layout, key: str) -> str | None:
    """Remove the request and return its conversation id; None if another relay took it.

    Removed before the hint is published, so a request made meanwhile is a new file."""
    path = requests_dir(layout) / key
    try:
        conversation_id = path.read_bytes().decode("utf-8")
        path.unlink()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return None
    return conversation_id or None
