"""Which export a path is, and its conversations read as a stream.

A folder is Claude Code's projects folder; a zip holds ``conversations.json`` (ChatGPT's and
Claude.ai's exports both do), read up to the cut when the zip was cut short (``cut_zip``); a
JSON array is ChatGPT's or Claude.ai's ``conversations.json``, told apart by its first
conversation (``mapping`` or ``chat_messages``); lines of JSON objects are the generic JSONL.
JSON arrays are split into their conversations within bounds (``bounded``: each at most 32 MB
and 64 deep, read on its own), so a 1 GB export never sits in memory and a hostile part costs
that part. A conversation that cannot be read is yielded as ``Broken`` (where and why) and the
rest go on; an export that ends early stops with a ``Broken`` saying where. How far the
reading is (``Extent``: bytes read of the export's size) comes from the open file's
own position, so the progress bar costs no second read.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memhoncho.errors import ImportFormat, ImportUnreadable
from memhoncho.imports import bounded, chatgpt, claude_ai, claude_code_folder, cut_zip, jsonl
from memhoncho.imports.extent import Extent
from memhoncho.imports.model import Conversation

FORMATS = (chatgpt.FORMAT, claude_code_folder.FORMAT, claude_ai.FORMAT, jsonl.FORMAT)
CONVERSATIONS_JSON = "conversations.json"
PEEK_BYTES = 4096  # read to tell a JSON array from JSON lines
MAX_ZIP_RATIO = 100  # an export's JSON expands about 10 times from its zip; a bomb, 1,000
BOMB_FLOOR_BYTES = 64 * 1024 * 1024  # a small member is read whatever its ratio


@dataclass(frozen=True)
class Broken:
    """A part of the export that could not be read: skipped, counted, reported."""

    where: str
    reason: str


Item = Conversation | Broken


def detect(path: Path) -> str:
    """The export's format (ImportUnreadable: cannot be read; ImportFormat: none known)."""
    if path.is_dir():
        return claude_code_folder.FORMAT
    if not path.exists():
        raise ImportUnreadable(f"no such file or folder: {path}", path=str(path))
    with _opened(path) as handle:
        head = handle.read(PEEK_BYTES).lstrip()
    if head.startswith(b"{"):
        return jsonl.FORMAT
    if not head.startswith(b"["):
        raise ImportFormat(f"{path} is neither a JSON array nor JSON lines", path=str(path))
    first = _first_item(path)
    if isinstance(first, dict) and "mapping" in first:
        return chatgpt.FORMAT
    if isinstance(first, dict) and "chat_messages" in first:
        return claude_ai.FORMAT
    raise ImportFormat(
        f"{path}: its conversations have neither mapping (ChatGPT) nor chat_messages"
        " (Claude.ai); say --format",
        path=str(path),
    )


def read(path: Path, fmt: str, extent: Extent | None = None) -> Iterator[Item]:
    """The export's conversations in order, each a ``Conversation`` or a ``Broken``;
    ``extent``, when given, follows how far the reading is."""
    extent = extent if extent is not None else Extent()
    if fmt == claude_code_folder.FORMAT:
        if not path.is_dir():
            raise ImportFormat(f"{path} is not a folder (Claude Code's projects folder is)")
        yield from claude_code_folder.conversations(path, extent)
    elif fmt == jsonl.FORMAT:
        yield from _lines(path, extent)
    elif fmt in (chatgpt.FORMAT, claude_ai.FORMAT):
        reader = chatgpt.conversation if fmt == chatgpt.FORMAT else claude_ai.conversation
        yield from _array(path, reader, extent)
    else:
        raise ImportFormat(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


@contextmanager
def _opened(path: Path, extent: Extent | None = None) -> Iterator[IO[bytes]]:
    """The file, or the ``conversations.json`` inside a zip (ImportUnreadable otherwise);
    ``extent`` learns its size and follows its position."""
    extent = extent if extent is not None else Extent()
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if _is_conversations_json(n)]
                if not names:
                    raise ImportFormat(f"{path} holds no {CONVERSATIONS_JSON}", path=str(path))
                name = min(names, key=len)
                _refuse_bomb(path, archive.getinfo(name))
                with archive.open(name) as member:
                    extent.total, extent.tell = archive.getinfo(name).file_size, member.tell
                    yield member
        else:
            with open(path, "rb") as handle:
                extent.total, extent.tell = os.fstat(handle.fileno()).st_size, handle.tell
                cut_short = handle.read(len(cut_zip.LOCAL_SIGNATURE)) == cut_zip.LOCAL_SIGNATURE
                handle.seek(0)
                if cut_short:  # a zip without its end: a download that stopped
                    yield _cut_zip_member(path, handle)
                elif path.suffix == ".zip":
                    raise ImportUnreadable(f"{path} is not a zip", path=str(path))
                else:
                    yield handle
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ImportUnreadable(f"{path} cannot be read: {type(exc).__name__}") from None


def _refuse_bomb(path: Path, info: zipfile.ZipInfo) -> None:
    """A member that expands past ``MAX_ZIP_RATIO`` times its compressed size (and past
    ``BOMB_FLOOR_BYTES``) is refused before it is read: JSON an export holds compresses about
    ten times; a zip bomb (one string of gigabytes) a thousand."""
    ratio = info.file_size / max(1, info.compress_size)
    if info.file_size > BOMB_FLOOR_BYTES and ratio > MAX_ZIP_RATIO:
        raise ImportUnreadable(
            f"{path}: {info.filename} expands {ratio:.0f} times (to {info.file_size} bytes);"
            f" an export expands at most {MAX_ZIP_RATIO} times: refused as a zip bomb",
            path=str(path),
        )


def _cut_zip_member(path: Path, handle: IO[bytes]) -> IO[bytes]:
    """The ``conversations.json`` of a zip that lost its end, read up to the cut
    (``cut_zip``); ImportUnreadable when the cut comes before it."""
    member = cut_zip.find(handle, _is_conversations_json)
    if member is None:
        raise ImportUnreadable(
            f"{path} is a zip cut short before its {CONVERSATIONS_JSON}: download it again",
            path=str(path),
        )
    return member


def _is_conversations_json(name: str) -> bool:
    return name.rsplit("/", 1)[-1] == CONVERSATIONS_JSON


def _first_item(path: Path) -> Any:
    with _opened(path) as handle:
        try:
            for part in bounded.elements(handle):
                return _loads(part) if isinstance(part, bytes) else None
        except (bounded.Truncated, ValueError):
            raise ImportUnreadable(f"{path} is not valid JSON", path=str(path)) from None
    return None


def _array(
    path: Path, reader: Callable[[Any, str], Conversation], extent: Extent
) -> Iterator[Item]:
    """The array's conversations, each read on its own within ``bounded``'s limits."""
    index = -1
    with _opened(path, extent) as handle:
        try:
            for index, part in enumerate(bounded.elements(handle)):
                yield _parsed(reader, part, f"conversation {index}")
        except (bounded.Truncated, zipfile.BadZipFile, EOFError, OSError) as exc:
            where = f"after conversation {index}" if index >= 0 else "before any conversation"
            yield Broken(where, f"the export ends or breaks here ({type(exc).__name__})")


def _lines(path: Path, extent: Extent) -> Iterator[Item]:
    with _opened(path, extent) as handle:
        for number, line in enumerate(bounded.lines(handle), start=1):
            if isinstance(line, bytes) and not line.strip():
                continue
            yield _parsed(jsonl.conversation, line, f"line {number}")


def _parsed(
    reader: Callable[[Any, str], Conversation], part: bytes | bounded.Refused, where: str
) -> Item:
    """One part: refused past a bound, broken when it is not JSON, else read."""
    if isinstance(part, bounded.Refused):
        return Broken(where, part.reason)
    try:
        data = _loads(part)
    except ValueError as exc:  # the position only: the part is someone's words
        return Broken(where, str(exc))
    return _one(reader, data, where)


def _loads(part: bytes) -> Any:
    """The JSON of one part (ValueError naming why, never what)."""
    try:
        return json.loads(part)
    except RecursionError:  # a JSONL line nested past the parser's own depth
        raise ValueError(f"nested deeper than {bounded.MAX_DEPTH}") from None
    except ValueError:
        raise ValueError("not valid JSON") from None


def _one(reader: Callable[[Any, str], Conversation], data: Any, where: str) -> Item:
    try:
        return reader(data, where)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "an unexpected shape"
        return Broken(where, reason)
