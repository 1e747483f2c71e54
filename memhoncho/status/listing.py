"""Cheap directory listings for the census: one ``scandir``, no exception for a missing or
unreadable directory (its reason comes back as a string for the status view)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def reason(exc: OSError) -> str:
    """Why a file could not be read, in a word or two (no path: the caller names the file)."""
    return exc.strerror or type(exc).__name__


def listing(
    directory: Path, suffix: str, read: Callable[[os.DirEntry[str]], T]
) -> tuple[dict[str, T], str | None]:
    """``{name without suffix: read(entry)}``; the reason when the directory cannot be listed."""
    found: dict[str, T] = {}
    cut = len(suffix)
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(suffix) and not name.startswith("."):
                    try:
                        found[name[:-cut]] = read(entry)
                    except FileNotFoundError:
                        continue  # removed while listing
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot list {directory.name}/ ({reason(exc)})"
    return found, None


def list_stats(directory: Path, suffix: str) -> tuple[dict[str, os.stat_result], str | None]:
    """``{name without suffix: stat}``."""
    return listing(directory, suffix, os.DirEntry.stat)


def list_inodes(directory: Path, suffix: str) -> tuple[dict[str, int], str | None]:
    """``{name without suffix: inode}`` from the listing alone (no stat)."""
    return listing(directory, suffix, os.DirEntry.inode)


def open_dir(directory: Path) -> int:
    """A descriptor of ``directory`` (stats relative to it skip the path walk); -1 if none."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return -1


def count_lines(path: Path) -> int:
    """Newlines in ``path``, read a MiB at a time."""
    count = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            count += chunk.count(b"\n")
    return count
