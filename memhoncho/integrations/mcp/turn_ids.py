"""The run id of a save that names none: a retry is the same turn again right after itself.

A model rarely has an id to pass, and people say "yes" twice. So a derived run id is the turn's
digest chained to the batch saved just before it: ``mcp-<turn digest>-<chain digest>``. A save
whose words repeat the conversation's latest save is a retry (the client lost the answer) and
gets that save's id, so it is stored once; the same words after other turns came between are a
new turn, with a new id, and are kept. Saves of one conversation are taken one after the other,
as a chat's turns are: two saves in flight at once are each chained to the turn before both.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from memhoncho.capture.record import batch_id

if TYPE_CHECKING:
    from memhoncho.store.base import Store

PREFIX = "mcp-"  # a run id the server derived, not one the client passed
DIGEST_CHARS = 16  # hex characters of each part: 64 bits, within one conversation
NO_TURN = ""  # what the first turn of a conversation is chained to


def _digest(value: object) -> str:
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def turn_digest(turn: list[tuple[str, str]]) -> str:
    """The same turn (roles and texts, in order), the same digest."""
    return _digest([[role, text] for role, text in turn])


def chained(turn: list[tuple[str, str]], before: str, digest: str | None = None) -> str:
    """The run id of ``turn`` saved right after the batch ``before`` (``NO_TURN``: first);
    ``digest``: the turn's, when the caller has it already."""
    return f"{PREFIX}{digest or turn_digest(turn)}-{_digest(before)}"


def derived_run_id(
    store: Store, key: str, conversation_id: str, turn: list[tuple[str, str]]
) -> str:
    """The latest save's run id when ``turn`` repeats it (a retry), else a new turn's."""
    digest = turn_digest(turn)
    last = store.newest_record(key)
    if last is not None and "batch_id" in last:  # the latest save, not yet compacted away
        run_id = str(last.get("run_id", ""))
        if run_id.startswith(f"{PREFIX}{digest}-"):
            return run_id
        return chained(turn, str(last["batch_id"]), digest)
    # Delivered and compacted: the ledger keeps the latest batches, newest last.
    ledger = store.read_ledger(key)
    batches = ledger.delivered_batches if ledger is not None else []
    if not batches:
        return chained(turn, NO_TURN, digest)
    retry = chained(turn, batches[-2] if len(batches) > 1 else NO_TURN, digest)
    if batch_id(conversation_id, retry) == batches[-1]:
        return retry
    return chained(turn, batches[-1], digest)
