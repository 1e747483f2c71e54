"""A recall task proves it comes from the deployment: an HMAC over the call, keyed by a key
derived from the deployment's Honcho API key.

The broker carries hints, and recall calls: a process that can push onto the broker (another
local user on an unauthenticated Redis) pushed a ``memhoncho.recall`` naming another owner and
read that owner's memory back, or planted a fact with ``honcho_remember``. Every host and
worker of a deployment holds the Honcho API key (a worker needs it to deliver, a host to
hint); whoever does not hold it could not call Honcho anyway. So the host signs each recall
call (the tool, its checked arguments, the owner, the task id) with a key derived from the API
key, and a worker runs only a call whose proof it can recompute; any other is refused, logged
and counted (``state/refused-tasks.json``, the status view's ``refused_tasks``). Nothing of the
key travels: the proof is a SHA-256 HMAC, and the derived key is never the API key itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

#: the label the signing key is derived under (a key for nothing else)
KEY_LABEL = b"memhoncho recall task proof v1"


def signing_key(api_key: str) -> bytes:
    return hmac.new(api_key.encode("utf-8"), KEY_LABEL, hashlib.sha256).digest()


def proof(api_key: str, task_id: str, name: str, arguments: Any, owner: str | None) -> str:
    """The proof of one recall call, bound to its task id (a proof is not replayed onto
    another task's call)."""
    call = json.dumps([task_id, name, arguments, owner], sort_keys=True, default=str)
    return hmac.new(signing_key(api_key), call.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(
    api_key: str | None,
    given: object,
    task_id: str,
    name: str,
    arguments: Any,
    owner: str | None,
) -> bool:
    """Whether ``given`` proves the call (in constant time); False without a key."""
    if api_key is None or not isinstance(given, str):
        return False
    expected = proof(api_key, task_id, name, arguments, owner)
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
