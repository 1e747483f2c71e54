"""What the Claude Code hooks keep between calls, in ``<data dir>/state/claude-code/``: each
session's cursor into its transcript (``sessions/<session>.json``, under the session's lock so
two hooks of one session never read the same bytes at once), the newest session of each owner
(so a new session's ``SessionStart`` has memory to show), and the last hook errors (the status
view's ``hooks`` section).

The cursor only saves work: losing it re-reads the transcript, and every turn read again is
captured again as a ``duplicate``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memhoncho import deployment
from memhoncho.imports.claude_code import ReadState
from memhoncho.store import atomic
from memhoncho.store.locks import file_lock
from memhoncho.store.modes import make_dirs

FOLDER = ("state", "claude-code")
MAX_ERRORS = 20  # the newest hook errors kept for the status view
LOCK_TIMEOUT_S = 10.0  # seconds a hook waits for another hook of its session


@dataclass(frozen=True)
class Cursor:
    """A session's place in its transcript, and whether its fork was recorded."""

    read: ReadState
    forked: bool = False


def folder(data_dir: str | Path) -> Path:
    return Path(data_dir).joinpath(*FOLDER)


def _name(value: str) -> str:
    """A file name for a session id or owner: readable when safe, a digest otherwise."""
    if value and len(value) <= 100 and all(c.isalnum() or c in "-_" for c in value):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:32]


@contextmanager
def session_lock(data_dir: str | Path, session_id: str) -> Iterator[None]:
    """One hook at a time per session (``LockBusy`` past ``LOCK_TIMEOUT_S``)."""
    path = folder(data_dir) / "locks" / f"{_name(session_id)}.lock"
    make_dirs(path.parent)
    with file_lock(path, timeout_s=LOCK_TIMEOUT_S):
        yield


def load(data_dir: str | Path, session_id: str) -> Cursor:
    """The session's cursor; a fresh one when there is none or it cannot be read."""
    try:
        data = atomic.read_json(_path(data_dir, session_id))
    except (OSError, ValueError):
        return Cursor(ReadState())
    if not isinstance(data, dict) or data.get("session_id") != session_id:
        return Cursor(ReadState())
    read = data.get("read")
    return Cursor(
        ReadState.from_dict(read if isinstance(read, dict) else {}), data.get("forked") is True
    )


def save(data_dir: str | Path, session_id: str, cursor: Cursor, transcript: str) -> None:
    """Replace the cursor atomically, without fsync: a cursor lost to a power cut only makes
    the next hook read again what it captured (duplicates), and the hook's wait is the user's."""
    _replace(
        _path(data_dir, session_id),
        {
            "session_id": session_id,
            "transcript": transcript,
            "read": cursor.read.as_dict(),
            "forked": cursor.forked,
            "at": time.time(),
        },
    )


def _path(data_dir: str | Path, session_id: str) -> Path:
    return folder(data_dir) / "sessions" / f"{_name(session_id)}.json"


# ---- the owner's newest session -----------------------------------------------------------


def remember_session(data_dir: str | Path, owner: str | None, session_id: str) -> None:
    if latest_session(data_dir, owner) != session_id:  # most hooks find it already so
        _replace(_latest(data_dir, owner), {"owner": owner, "session_id": session_id})


def _replace(path: Path, value: Any) -> None:
    make_dirs(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(value, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def latest_session(data_dir: str | Path, owner: str | None) -> str | None:
    try:
        data = atomic.read_json(_latest(data_dir, owner))
    except (OSError, ValueError):
        return None
    value = data.get("session_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _latest(data_dir: str | Path, owner: str | None) -> Path:
    return folder(data_dir) / "latest" / f"{_name(owner or '-none-')}.json"


# ---- the last hook errors -----------------------------------------------------------------


def record_error(data_dir: str | Path, event: str, code: str, message: str) -> None:
    """Keep the error among the newest ``MAX_ERRORS`` (never message content: codes and
    memhoncho's own words only). Best effort: a hook that cannot write this still exits 0.

    Kept only in an initialised data directory: a mistyped one (``ERR_NOT_INITIALISED``) gets
    nothing created in it, and the caller's log line is then the only record."""
    path = folder(data_dir) / "errors.json"
    try:
        if deployment.identity(data_dir) is None:
            return
        make_dirs(path.parent)
        with file_lock(path.with_suffix(".lock"), timeout_s=LOCK_TIMEOUT_S):
            errors = last_errors(data_dir)
            errors.append({"at": time.time(), "event": event, "code": code, "message": message})
            atomic.write_json(path, errors[-MAX_ERRORS:])
    except Exception:  # noqa: BLE001 - the log line is the record of last resort
        pass


def last_errors(data_dir: str | Path) -> list[dict[str, Any]]:
    """The newest hook errors, oldest first (empty when none, or unreadable)."""
    try:
        data = json.loads((folder(data_dir) / "errors.json").read_bytes())
    except (OSError, ValueError):
        return []
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
