"""The settings' files read as JSON objects, re-read only when their stat changes (live, cheap),
and the secret files named by settings (``api_key_file``, ``status_token_file``)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("memhoncho.settings")

RACY_S = 0.05  # seconds; a file changed this recently may change again within one mtime tick
RACY_NS = int(RACY_S * 1e9)


@dataclass(frozen=True)
class Read:
    """One file's parsed content, and the stat it was read under."""

    stamp: tuple[int, int, int, int]  # inode, size, mtime and ctime in ns
    trusted: bool  # False while the file is too new to trust its stamp
    generation: int  # bumps at every real read, so a derived cache knows it is stale
    value: dict[str, Any]
    problem: str | None = None  #: why the file cannot be used (it then reads as {})


_reads: dict[Path, Read] = {}
_generations = itertools.count(1)


def read_json_cached(path: Path) -> Read:
    """The JSON object in ``path``, re-read only when its stat changes (so changes stay live).

    Timestamps are coarse (one kernel tick), so a file whose ctime is within ``RACY_S`` of the
    read is re-read next time too, as git does for its index: an in-place rewrite of the same
    size within one tick is never missed.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return MISSING
    except OSError:
        st = None
    if st is not None:
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = _reads.get(path)
        if cached is not None and cached.trusted and cached.stamp == stamp:
            return cached
        read_at_ns = time.time_ns()
    value, problem = read_json_object(path)
    if st is None:
        return Read((0, 0, 0, 0), False, next(_generations), value, problem)
    trusted = stamp[3] < read_at_ns - int(RACY_S * 1e9)
    fresh = Read(stamp, trusted, next(_generations), value, problem)
    _reads[path] = fresh
    return fresh


MISSING = Read((0, 0, 0, 0), True, 0, {})


def read_json_object(path: Path) -> tuple[dict[str, Any], str | None]:
    """The JSON object in ``path`` ({} when absent), and why it cannot be used, if it cannot."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        return {}, f"cannot be read ({reason})"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(value, dict):
        return {}, f"is not a JSON object (it holds a JSON {_json_kind(value)})"
    return value, None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


_secret_files: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}


def secret_file(path: str | None) -> str | None:
    """The stripped content of a secret file; None when unset, missing, unreadable or blank.

    Re-read only when its stat changes, so a rotated secret applies at the next call. The
    content is never logged, and neither is the reason beyond the error's type.
    """
    if not path:
        return None
    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = _secret_files.get(path)
        if cached is not None and cached[0] == stamp and stamp[3] < time.time_ns() - RACY_NS:
            return cached[1]
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read the secret file %s (%s)", path, type(exc).__name__)
        return None
    _secret_files[path] = (stamp, value)
    return value
