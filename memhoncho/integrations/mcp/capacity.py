"""How much the MCP server runs at once: a save never waits behind someone's recall.

A save and a sections read are local work (an fsync, a file or a row) with threads of their own.
Recall calls Honcho, which may hang for ``chat_timeout_s``: it has its own threads, at most
``RECALL_PER_OWNER`` calls of one owner and ``RECALL_TOTAL`` of everyone in flight. A recall
call past either bound is refused at once with ``RecallBusy`` (nothing asked) rather than
queued behind calls that may take minutes, so one owner cannot take the others' recall.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from memhoncho.errors import RecallBusy

RECALL_PER_OWNER = 8  # recall calls one owner may have in flight
RECALL_TOTAL = 32  # recall calls in flight for every owner together (threads for recall)
LOCAL_THREADS = 16  # threads for saves and sections reads, shared by no recall


class Capacity:
    """The server's two pools, and who holds recall's. Used from the event loop only."""

    def __init__(
        self,
        per_owner: int = RECALL_PER_OWNER,
        total: int = RECALL_TOTAL,
        local: int = LOCAL_THREADS,
    ) -> None:
        self.per_owner = per_owner
        self.total = total
        self.local = anyio.CapacityLimiter(local)
        # Admission below never lets more than ``total`` in, so recall never queues here.
        self.recall = anyio.CapacityLimiter(total)
        self._held: dict[str | None, int] = {}

    @contextmanager
    def recall_slot(self, owner: str | None) -> Iterator[None]:
        """A place for one recall call of ``owner``; RecallBusy when none is free."""
        if self._held.get(owner, 0) >= self.per_owner:
            raise RecallBusy(
                f"this user already has {self.per_owner} memory questions in flight; "
                "ask again once one has answered"
            )
        if sum(self._held.values()) >= self.total:
            raise RecallBusy(
                f"the server has {self.total} memory questions in flight; ask again shortly"
            )
        self._held[owner] = self._held.get(owner, 0) + 1
        try:
            yield
        finally:
            self._held[owner] -= 1
            if not self._held[owner]:
                del self._held[owner]
