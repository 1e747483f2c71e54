"""How far an import has read its export, in bytes: what the terminal's bar and ETA show
(``memhoncho import``), taken from the open file's own position so nothing is read twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Extent:
    """How far ``source.read`` is through the export, for a progress bar and its ETA: ``done()``
    bytes of ``total`` (None until the export is opened, or when its size is unknown). A file
    is measured by its handle's position, a zip by its ``conversations.json``'s uncompressed
    size and position, a folder by whole session files."""

    total: int | None = None
    read: int = 0  #: bytes counted as they go (a folder's files), when there is no ``tell``
    tell: Callable[[], int] | None = None  #: the open file's position

    def done(self) -> int:
        if self.tell is not None:
            try:
                return self.tell()
            except (OSError, ValueError):  # closed, or a stream that cannot say
                pass
        return self.read
