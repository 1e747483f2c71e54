"""A user left the host: record the departure and, when asked, purge what memhoncho keeps of them.

``user_deleted`` writes ``state/departures/<peer>.json`` (the status view lists it). With
``purge=True`` it also removes, from the store, the user's undelivered outbox records and the
representation snapshots of the user's conversations, and says what it removed. What Honcho
already holds is not touched here: deleting it there is the operator's call.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import CorruptFile
from memhoncho.store.base import Record, Store

log = logging.getLogger(__name__)


@dataclass
class Departure:
    """What ``user_deleted`` did. Conversation keys are file-name keys, never raw ids."""

    peer_id: str
    at: float
    purged: bool
    conversations: list[str] = field(default_factory=list)  #: keys purged of this user
    records_removed: int = 0
    messages_removed: int = 0
    caches_removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _owned_by(record: Record, owner: str | None) -> bool:
    return record.get("owner") == owner


def _ledger_owner(store: Store, key: str) -> tuple[bool, str | None]:
    """(known, owner) from the conversation's ledger; unknown when absent or corrupt."""
    try:
        ledger = store.read_ledger(key)
    except CorruptFile:
        return False, None
    return (True, ledger.owner) if ledger is not None else (False, None)


def _purge(deployment: Deployment, owner: str | None, departure: Departure) -> None:
    store = deployment.store()
    owners: dict[str, bool] = {}  # key -> this user owns the conversation
    for key in store.conversation_keys():
        kept, dropped = store.rewrite(key, lambda r: not _owned_by(r, owner))
        owned = bool(dropped) and not kept
        if not kept and not dropped:  # an outbox with nothing pending: ask the ledger
            known, ledger_owner = _ledger_owner(store, key)
            owned = known and ledger_owner == owner
        owners[key] = owned or bool(dropped)
        if dropped:
            departure.conversations.append(key)
            departure.records_removed += len(dropped)
            departure.messages_removed += sum(len(r.get("messages") or []) for r in dropped)
    for key in sorted(store.snapshot_times()):
        if key in owners:
            owns = owners[key]
        else:
            known, ledger_owner = _ledger_owner(store, key)
            owns = known and ledger_owner == owner
        if not owns or not store.remove_snapshot(key):
            continue
        departure.caches_removed += 1
        if key not in departure.conversations:
            departure.conversations.append(key)


def user_deleted(deployment: Deployment, owner: str | None, *, purge: bool = False) -> Departure:
    """Record that ``owner`` left; with ``purge`` remove their pending records and caches here."""
    peer = ids.peer_id(owner)  # refuses a malformed name before anything changes
    departure = Departure(peer_id=peer, at=time.time(), purged=purge)
    if purge:
        _purge(deployment, owner, departure)
    departure.conversations.sort()
    deployment.store().write_departure(peer, departure.as_dict())
    log.warning(
        "user departed" + (" and was purged" if purge else ""),
        extra={
            "action": "user_departed",
            "peer": peer,
            "purged": purge,
            "records_removed": departure.records_removed,
            "caches_removed": departure.caches_removed,
        },
    )
    return departure
