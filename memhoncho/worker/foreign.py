"""A delivery hint of another deployment: said in the log with both identities, counted for the
status view (``store/foreign_hints.py``), and never dropped silently.

A hint carries the identity of the deployment that published it (``Deployment.hint_identity``:
the data directory's id on the file store, the database's on PostgreSQL). A worker that gets
one of another identity serves another data directory or store than the host that captured:
the turn it points at is in a folder or database this worker never reads (a mistyped folder,
another database, a host still on the files while its workers moved to PostgreSQL). The hint
is still taken as a hint of this deployment (delivery is level-triggered: a conversation with
nothing pending here costs one look), so a hint that was ours after all is not lost, and
nothing is published again: no loop.
"""

from __future__ import annotations

import logging

from memhoncho.deployment import Deployment
from memhoncho.store.foreign_hints import add_foreign_hint

log = logging.getLogger(__name__)


#: this worker's identity per place (config dir, data dir, store URL): an identity is written
#: once, so it is read once; an unknown one (no identity yet, a database out of reach) is not kept
_known: dict[tuple[str, str, str | None], str] = {}


def ours(deployment: Deployment) -> str | None:
    place = (str(deployment.config_dir), str(deployment.data_dir), deployment.settings().store_url)
    found = _known.get(place)
    if found is None:
        found = deployment.hint_identity()
        if found is not None:
            _known[place] = found
    return found


def check(deployment: Deployment, conversation_id: str, theirs: str | None) -> bool:
    """Whether the hint is of another deployment; if so it is logged and counted. A hint with
    no identity (a worker's own re-send, an older host) is taken as this deployment's."""
    if theirs is None:
        return False
    mine = ours(deployment)
    if mine is None or theirs == mine:
        return False
    try:
        total: int | None = add_foreign_hint(deployment.layout, theirs, mine, conversation_id)
    except OSError:  # the count is lost, not the hint: it is still said here
        total = None
    log.warning(
        "a delivery hint of another deployment: its host captures where this worker never"
        " reads (check MEMHONCHO_DATA_DIR / store_url of both)",
        extra={
            "action": "foreign_hint",
            "conversation": conversation_id,
            "hint_deployment": theirs,
            "worker_deployment": mine,
            "foreign_hints": total,
        },
    )
    return True
