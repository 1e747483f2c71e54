"""The crash-safe clone of a parent's Honcho session for a forked child.

Honcho's clone picks a random session id and a retry makes a second session, so every step is
written down before the next one and a retry finds what the last attempt left:

1. the child's ledger gets ``clone_intent`` (parent session, anchor message, a unique tag);
2. the parent session's metadata gets ``memhoncho_clone_intent: <tag>``; a clone copies its
   parent's metadata, so the new session carries the tag from the moment it exists;
3. the intent moves to ``cloning`` (a clone request may now exist), then Honcho clones;
4. the intent records the clone's id, the clone is tagged as the child's
   (``memhoncho_fork_child``, ``memhoncho_fork_tag``), the parent's intent tag is taken off,
   the child's peers and configuration are set;
5. the ledger gets the session id, the clone's anchors and the decision; the intent goes.

A retry in ``cloning`` without a known id looks for a session carrying the tag before cloning
again; it finds none only if no clone was saved. Clones of one parent are serialized by the
parent's conversation lock (held by the caller), so the parent carries one tag at a time.

A worker killed mid-request leaves that request to land later: a clone saved after the retry
looked for it, or a metadata write that clobbers the next clone's tag. So every writer marks
the parent (``state/forks/cloning/<parent>.json``) for the span of its writes, and whoever
finds a mark left behind fences it (``fence.py``, the same fence as a delivery's in-flight
mark) from taking the lock, after which whatever the dead writer had in flight has landed or
never will.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memhoncho.delivery import fence
from memhoncho.errors import HonchoRejected
from memhoncho.honcho import adapter
from memhoncho.models import CloneIntent, CloneStage, ForkDecision, Ledger
from memhoncho.settings import Settings
from memhoncho.store.base import Store
from memhoncho.store.forks import ForkRecord

if TYPE_CHECKING:
    from honcho import Honcho

log = logging.getLogger(__name__)

INTENT_KEY = "memhoncho_clone_intent"  #: on the parent while a clone for a child is under way
FORK_CHILD_KEY = "memhoncho_fork_child"  #: on a clone: the child conversation's key
FORK_TAG_KEY = "memhoncho_fork_tag"  #: on a clone: the tag of the intent that made it
ENTRY_ID_KEY = "entry_id"  #: message metadata: the host's transcript entry (capture.py)


#: Tests observe the named steps of a resolution (e.g. to SIGKILL a process at one); none in use.
STEP_OBSERVERS: list[Callable[[str], None]] = []


def reached(step: str) -> None:
    for observer in list(STEP_OBSERVERS):
        observer(step)


class Clone:
    """One child's clone of its parent at an anchor, resumable from its ledger's intent."""

    def __init__(
        self,
        store: Store,
        client: Honcho,
        key: str,
        record: ForkRecord,
        *,
        parent_key: str,
        user_peer_id: str,
        agent_peer_id: str,
        anchor_window: int,
        settings: Settings,
    ) -> None:
        self.store = store
        self.client = client
        self.key = key
        self.record = record
        self.parent_key = parent_key
        self.user_peer_id = user_peer_id
        self.agent_peer_id = agent_peer_id
        self.anchor_window = anchor_window
        self.settings = settings  #: for the fence (honcho_timeout_s, send_settle_s)

    def start(
        self, ledger: Ledger, parent_session_id: str, anchor_entry: int, anchor_message_id: str
    ) -> Ledger:
        """Write the intent, then clone (``resume`` does the rest)."""
        intent = CloneIntent(
            parent_session_id=parent_session_id,
            anchor_entry=anchor_entry,
            anchor_message_id=anchor_message_id,
            tag=uuid.uuid4().hex,
            stage=CloneStage.PREPARED,
            at=time.time(),
        )
        ledger = self._write(ledger, clone_intent=intent)
        reached("intent-written")
        return self.resume(ledger)

    def resume(self, ledger: Ledger) -> Ledger:
        """Carry the intent in ``ledger`` through to a recorded clone; safe to call again."""
        intent = ledger.clone_intent
        assert intent is not None, "resume needs a ledger with a clone intent"
        parent_sid = intent.parent_session_id
        tag = intent.tag
        self._fence()
        clone_sid = intent.clone_session_id
        if clone_sid is None and intent.stage == CloneStage.CLONING:
            clone_sid = self._find(tag, parent_sid)  # settled: the fence waited for it
        if clone_sid is None:
            self._tag_parent(parent_sid, tag)
            reached("parent-tagged")
            intent = intent.model_copy(update={"stage": CloneStage.CLONING, "at": time.time()})
            ledger = self._write(ledger, clone_intent=intent)
            reached("cloning-written")
            try:
                clone_sid = adapter.clone_session(self.client, parent_sid, intent.anchor_message_id)
            except HonchoRejected as exc:
                if exc.status != 404:
                    raise
                self._untag_parent(parent_sid)
                self.store.remove_clone_marker(self.parent_key)
                return self._anchor_gone(ledger, intent)
            reached("cloned")
        if intent.clone_session_id != clone_sid:
            intent = intent.model_copy(
                update={"stage": CloneStage.CLONED, "clone_session_id": clone_sid}
            )
            ledger = self._write(ledger, clone_intent=intent)
            reached("clone-recorded")
        self._tag_clone(clone_sid, tag)
        reached("clone-tagged")
        self._untag_parent(parent_sid)
        self.store.remove_clone_marker(self.parent_key)
        reached("parent-untagged")
        adapter.ensure_session(self.client, clone_sid, self.user_peer_id, self.agent_peer_id)
        reached("peers-ensured")
        anchors = self._anchors(clone_sid)
        decision = ForkDecision(
            parent_id=self.record.parent_id,
            at_entry=self.record.at_entry,
            outcome="clone",
            anchor_entry=intent.anchor_entry,
            parent_session_id=parent_sid,
            decided_at=time.time(),
            reason=f"cloned the parent at its anchor for entry {intent.anchor_entry}",
        )
        self.store.append_decision(self.key, decision)
        ledger = self._write(
            ledger, session_id=clone_sid, anchors=anchors, fork=decision, clone_intent=None
        )
        reached("decided")
        log.info(
            "fork resolved",
            extra={
                "action": "fork_resolved",
                "conversation": self.key,
                "outcome": "clone",
                "anchor_entry": decision.anchor_entry,
            },
        )
        return ledger

    # ---- steps ------------------------------------------------------------------------

    def _write(self, ledger: Ledger, **update: Any) -> Ledger:
        ledger = ledger.model_copy(update=update)
        self.store.write_ledger(self.key, ledger)
        return ledger

    def _fence(self) -> None:
        """Let a previous writer's requests land before this one writes to the parent.

        The marker is written before the first write to the parent or a clone and removed
        after the last; found here (under the parent's lock) it means the last holder died or
        failed with requests perhaps still in flight: a clone that would be saved late, or a
        metadata write that would clobber this attempt's tag. Its death came before this lock
        was taken, so those requests began before the fence's start, which is recorded the
        first time the marker is found (and kept across retries). Until the fence opens this
        raises InFlightSettling with the wait, and the task comes back after it.
        """
        marker = self.store.read_clone_marker(self.parent_key)
        if marker is not None:
            fence_at = marker.get("fence_at")
            if not isinstance(fence_at, float):
                fence_at = time.time()
                self.store.write_clone_marker(self.parent_key, {"fence_at": fence_at})
            fence.check(fence_at, self.settings, "an interrupted clone's request")
        self.store.write_clone_marker(self.parent_key, {"writing_since": time.time()})

    def _find(self, tag: str, parent_sid: str) -> str | None:
        """The session an earlier attempt cloned: it carries the tag, tagged as a clone or not."""
        found: dict[str, dict[str, Any]] = {}
        for key in (INTENT_KEY, FORK_TAG_KEY):
            for session in adapter.find_sessions(self.client, {key: tag}):
                if session["id"] != parent_sid:
                    found[session["id"]] = session
        if not found:
            return None
        if len(found) > 1:
            log.error(
                "more than one clone carries one fork's tag; using the oldest",
                extra={"action": "fork_duplicate_clone", "conversation": self.key},
            )
        oldest = min(found.values(), key=lambda s: (str(s["created_at"]), s["id"]))
        return str(oldest["id"])

    def _tag_parent(self, parent_sid: str, tag: str) -> None:
        metadata = adapter.session_metadata(self.client, parent_sid)
        if metadata.get(INTENT_KEY) != tag:
            adapter.set_session_metadata(self.client, parent_sid, {**metadata, INTENT_KEY: tag})

    def _untag_parent(self, parent_sid: str) -> None:
        metadata = adapter.session_metadata(self.client, parent_sid)
        if INTENT_KEY in metadata:
            metadata.pop(INTENT_KEY)
            adapter.set_session_metadata(self.client, parent_sid, metadata)

    def _tag_clone(self, clone_sid: str, tag: str) -> None:
        metadata = adapter.session_metadata(self.client, clone_sid)
        wanted = {k: v for k, v in metadata.items() if k not in (INTENT_KEY, FORK_CHILD_KEY)}
        wanted.update({FORK_CHILD_KEY: self.key, FORK_TAG_KEY: tag})
        if wanted != metadata:
            adapter.set_session_metadata(self.client, clone_sid, wanted)

    def _anchors(self, clone_sid: str) -> list[tuple[int, str]]:
        """The clone's own message ids for the entries it inherited, so it can be forked too."""
        anchors: list[tuple[int, str]] = []
        for message in adapter.list_messages(self.client, clone_sid):
            entry = message["metadata"].get(ENTRY_ID_KEY)
            if isinstance(entry, int) and not isinstance(entry, bool):
                anchors.append((entry, str(message["id"])))
        return anchors[-self.anchor_window :]

    def _anchor_gone(self, ledger: Ledger, intent: CloneIntent) -> Ledger:
        decision = ForkDecision(
            parent_id=self.record.parent_id,
            at_entry=self.record.at_entry,
            outcome="none-window",
            parent_session_id=intent.parent_session_id,
            decided_at=time.time(),
            reason="the parent's anchor message is no longer in Honcho; starting fresh",
        )
        self.store.append_decision(self.key, decision)
        log.warning(
            "fork starts fresh: the anchor message is gone",
            extra={"action": "fork_resolved", "conversation": self.key, "outcome": "none-window"},
        )
        return self._write(ledger, fork=decision, clone_intent=None)
