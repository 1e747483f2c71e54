"""The ledger: what Honcho holds of one conversation (``state/ledger/<conversation>.json``).

Only the worker holding the conversation lock writes it, always atomically. Capture reads it
through ``LedgerCache``, which re-reads only when the file's stat changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memhoncho.models import Ledger
from memhoncho.store.atomic import read_model, write_bytes
from memhoncho.store.layout import Layout


def read_ledger(layout: Layout, key: str) -> Ledger | None:
    """The conversation's ledger; None when it has none; CorruptFile when it cannot be parsed."""
    return read_model(layout.ledger(key), Ledger, "the conversation's ledger file")


def write_ledger(layout: Layout, key: str, ledger: Ledger) -> None:
    write_bytes(layout.ledger(key), ledger.model_dump_json().encode("utf-8"))


@dataclass
class _Cached:
    stamp: tuple[int, int, int]
    ledger: Ledger | None
    delivered: frozenset[str]


class LedgerCache:
    """Ledger reads for the capture path: a stat per call, a parse only after a change."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._cache: dict[str, _Cached] = {}
        self._paths: dict[str, Path] = {}

    def get(self, key: str) -> _Cached:
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = self.layout.ledger(key)
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = (0, 0, 0)
        cached = self._cache.get(key)
        if cached is None or cached.stamp != stamp:
            ledger = read_ledger(self.layout, key) if stamp != (0, 0, 0) else None
            delivered = frozenset(ledger.delivered_batches) if ledger else frozenset()
            cached = _Cached(stamp, ledger, delivered)
            self._cache[key] = cached
        return cached

    def delivered_seq(self, key: str) -> int:
        ledger = self.get(key).ledger
        return ledger.delivered_seq if ledger else 0

    def delivered_before(self, key: str, batch_id: str) -> bool:
        return batch_id in self.get(key).delivered

    def delivered_digest(self, key: str, batch_id: str) -> str | None:
        """The content digest the ledger kept for a delivered batch; None if it kept none."""
        ledger = self.get(key).ledger
        return ledger.delivered_digests.get(batch_id) if ledger else None
