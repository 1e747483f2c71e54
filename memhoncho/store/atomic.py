"""Atomic state-file writes: temp file in the same directory, fsync, replace, fsync the directory.

Every state file in the project is written through ``write_json`` or ``write_bytes``, so a
crash leaves either the old file or the new one, never a torn one. A write the disk refuses (full,
read-only, quota) is a ``StoreError`` (``ERR_STORE``) naming the file and the reason, so a full
disk is the same typed error in capture, delivery and the sweep. ``read_json`` and ``read_model``
read such a file back.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memhoncho.errors import CorruptFile, StoreError, StorePermission
from memhoncho.store.modes import make_dirs, open_file, set_file_mode

if TYPE_CHECKING:  # pydantic stays off the light paths that write through this module
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


@contextmanager
def refused_as_store_error(path: Path) -> Iterator[None]:
    """An OSError of a write becomes a StoreError that names the file, not its content."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        # Permission and a read-only file system do not pass with time: refused (exit 2),
        # not "retry" (a full disk or a quota may).
        permanent = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
        raise (StorePermission if permanent else StoreError)(
            f"could not write {path.name} ({reason})",
            file=path.name,
            errno=errno.errorcode.get(exc.errno or 0),
        ) from exc


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and durably (StoreError if the disk refuses).

    ``durable=False`` skips both fsyncs, for a file nothing depends on after a crash (a status
    marker): still never torn for a reader, but a power loss may leave the older one.
    """
    with refused_as_store_error(path):
        _write_bytes(path, data, durable)


def _write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        set_file_mode(fd, path.parent)  # 0600, or the group's 0660 (store/modes.py)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    """Replace ``path`` with ``value`` as JSON, atomically (and durably unless told not to)."""
    data = json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")
    write_bytes(path, data, durable=durable)


def read_json(path: Path) -> Any:
    """The JSON in ``path``; FileNotFoundError if absent, ValueError if it is not JSON."""
    return json.loads(path.read_bytes())


def read_model(path: Path, model: type[M], what: str) -> M | None:
    """``path`` parsed as ``model``; None when absent; CorruptFile ("``what`` is corrupt", naming
    the file) when it cannot be parsed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return model.model_validate_json(data)
    except ValueError:  # pydantic's ValidationError is one
        raise CorruptFile(f"{what} is corrupt", file=path.name) from None


def append_durably(path: Path, data: bytes) -> None:
    """Append whole lines to ``path`` (a side file: dead letters, quarantine) and fsync
    (StoreError if the disk refuses)."""
    with refused_as_store_error(path):
        _append(path, data)


def _append(path: Path, data: bytes) -> None:
    make_dirs(path.parent)
    created = not path.exists()
    fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:  # a write may be short (a signal, a full disk): finish the lines
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
