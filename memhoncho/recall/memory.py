"""What memhoncho puts back into the host's prompt: the representation cache and its sections.

A refresh (a worker: beat, idle, archived, first delivery) fetches from Honcho, for the
conversation's owner, the agent's representation of the user across conversations and the
session's context (summary, peer card), and writes them to the store with their fetch time
(``Store.write_snapshot``: ``cache/representations/<conversation>.json`` on the files, a row on
PostgreSQL, so a host on any machine reads what a worker on any other fetched). ``sections``
renders the two prompt sections from that snapshot alone: no call to Honcho, never raises, says
when it is stale, and stays within ``context_tokens`` by the estimate ``ceil(characters / 4)``.
"""

from __future__ import annotations

import logging
import math
import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import CorruptFile, HonchoRejected, InvalidId, InvalidInput, StoreError
from memhoncho.honcho import adapter
from memhoncho.models import Ledger
from memhoncho.models import Snapshot as Snapshot  # memory.Snapshot, where it was

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4  # the documented token estimate: ceil(characters / 4)
RENDER_OVERHEAD_TOKENS = 24  # the two tags of ``Sections.render`` and their attributes
RECENT_DELIVERY_S = 86_400.0  # a conversation delivered within a day keeps being refreshed
NOT_FOUND = 404
TRUNCATED = "\n[…]"  # ends a section cut to fit the budget
LONG_TERM = "long-term-memory"
HONCHO = "honcho-memory"


def estimate_tokens(text: str) -> int:
    """The token estimate every budget here uses: ``ceil(len(text) / CHARS_PER_TOKEN)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class SectionsStatus(StrEnum):
    """Why the sections hold what they hold."""

    FRESH = "fresh"  #: rendered from a snapshot younger than ``representation_ttl_s``
    STALE = "stale"  #: rendered from an older snapshot; a refresh is due
    MISSING = "missing"  #: no snapshot yet: empty sections
    CORRUPT = "corrupt"  #: the cache file cannot be read: empty sections
    INVALID = "invalid"  #: the conversation id cannot be mapped: empty sections
    ERROR = "error"  #: the store cannot be reached, or anything else: empty sections


class Section(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    text: str = ""
    tokens: int = 0  #: ``estimate_tokens(text)``
    truncated: bool = False


class Sections(BaseModel):
    """The two prompt sections of a conversation, as the host puts them in its prompt."""

    conversation_id: str
    status: SectionsStatus
    reason: str | None = None  #: why they are empty, when they are
    stale: bool = False
    fetched_at: float | None = None
    age_s: float | None = None
    sections: list[Section]
    tokens: int = 0  #: estimate of ``render()``, never above ``context_tokens``

    def text(self, name: str) -> str:
        return next((s.text for s in self.sections if s.name == name), "")

    def render(self) -> str:
        """The sections as prompt text: one tag per non-empty section."""
        stale = ' stale="true"' if self.stale else ""
        return "\n".join(
            f"<{s.name}{stale}>\n{s.text}\n</{s.name}>" for s in self.sections if s.text
        )


# ---------------------------------------------------------------------------- refresh


def refresh_representation(deployment: Deployment, conversation_id: str) -> Snapshot:
    """Fetch the owner's representation and the session context; write the cache atomically.

    InvalidInput when memhoncho knows nothing of the conversation; Honcho failures propagate
    (the task maps them to retry). No lock is held while Honcho answers.
    """
    key = ids.conversation_key(conversation_id)
    settings = deployment.settings()
    ledger = _ledger_or_none(deployment, key)
    user_peer_id = _user_peer_id(deployment, key, ledger)
    if user_peer_id is None:
        raise InvalidInput("memhoncho holds nothing of this conversation yet")
    client = adapter.read_client(deployment.honcho_target())
    agent = settings.agent_peer_id
    representation = adapter.representation(client, agent, user_peer_id)
    session_id = ledger.session_id if ledger else None
    summary: str | None = None
    card: list[str] | None = None
    if session_id:
        try:
            found = adapter.session_context(
                client,
                session_id,
                tokens=settings.context_tokens,
                peer_target=user_peer_id,
                peer_perspective=agent,
            )
        except HonchoRejected as exc:
            if exc.status != NOT_FOUND:
                raise
        else:
            summary, card = found.get("summary"), found.get("peer_card")
    snapshot = Snapshot(
        conversation_id=conversation_id,
        workspace_id=settings.workspace_id,
        user_peer_id=user_peer_id,
        agent_peer_id=agent,
        session_id=session_id,
        representation=representation or "",
        summary=summary,
        peer_card=card,
        context_tokens=settings.context_tokens,
        fetched_at=time.time(),
    )
    deployment.store().write_snapshot(key, snapshot)
    log.info(
        "representation refreshed",
        extra={"action": "representation_refreshed", "conversation_key": key},
    )
    return snapshot


def _ledger_or_none(deployment: Deployment, key: str) -> Ledger | None:
    try:
        return deployment.store().read_ledger(key)
    except CorruptFile:
        return None


def _user_peer_id(deployment: Deployment, key: str, ledger: Ledger | None) -> str | None:
    """The owner's peer: from an outbox record, else the ledger, else the last snapshot."""
    record = deployment.store().edges(key)[0]
    if record is not None and isinstance(record.get("user_peer_id"), str):
        return str(record["user_peer_id"])
    if ledger is not None:
        return ids.peer_id(ledger.owner)
    snapshot = read_snapshot(deployment, key)
    return snapshot.user_peer_id if snapshot is not None else None


def read_snapshot(deployment: Deployment, key: str) -> Snapshot | None:
    """The stored snapshot; None when absent; CorruptFile when it cannot be parsed."""
    return deployment.store().read_snapshot(key)


def refresh_due(deployment: Deployment, *, now: float | None = None) -> list[str]:
    """Delivered conversations whose snapshot is absent, or older than the TTL and behind.

    Behind: something was delivered after the snapshot was fetched, or within the last
    ``RECENT_DELIVERY_S`` (Honcho derives after delivery, so a fresh delivery keeps changing
    the representation for a while). A corrupt snapshot is due at once.
    """
    now = time.time() if now is None else now
    ttl = deployment.settings().representation_ttl_s
    store = deployment.store()
    fetched = store.snapshot_times()  # one listing, not one read per conversation
    due: list[str] = []
    for key in store.ledger_keys():
        ledger = _ledger_or_none(deployment, key)
        if ledger is None or ledger.last_delivered_at is None:
            continue
        fetched_at = fetched.get(key)
        if fetched_at is None:  # none yet, or an unreadable one
            due.append(ledger.conversation_id)
            continue
        if now - fetched_at < ttl:
            continue
        behind = ledger.last_delivered_at >= fetched_at
        if behind or now - ledger.last_delivered_at <= RECENT_DELIVERY_S:
            due.append(ledger.conversation_id)
    return due


# ---------------------------------------------------------------------------- sections


def sections(deployment: Deployment, conversation_id: str, *, now: float | None = None) -> Sections:
    """The prompt sections from the stored snapshot alone. Never raises; never calls Honcho.

    On PostgreSQL that is one primary-key SELECT, bounded by the store's timeouts; a database
    that cannot be reached gives empty sections with the ``error`` status and its reason.
    """
    try:
        return _sections(deployment, conversation_id, time.time() if now is None else now)
    except Exception as exc:  # the prompt must always be buildable
        log.warning(
            "prompt sections unavailable",
            extra={"action": "sections_failed", "error": type(exc).__name__},
        )
        return _empty(conversation_id, SectionsStatus.ERROR, type(exc).__name__)


def _empty(conversation_id: object, status: SectionsStatus, reason: str) -> Sections:
    return Sections(
        conversation_id=conversation_id if isinstance(conversation_id, str) else "",
        status=status,
        reason=reason,
        sections=[Section(name=LONG_TERM), Section(name=HONCHO)],
    )


def _sections(deployment: Deployment, conversation_id: str, now: float) -> Sections:
    try:
        key = ids.conversation_key(conversation_id)
    except InvalidId as exc:
        return _empty(conversation_id, SectionsStatus.INVALID, exc.message)
    settings = deployment.settings()
    try:
        snapshot = read_snapshot(deployment, key)
    except CorruptFile as exc:
        return _empty(conversation_id, SectionsStatus.CORRUPT, exc.message)
    except StoreError as exc:  # the database is unreachable, or the data dir unreadable
        log.warning(
            "prompt sections unavailable",
            extra={"action": "sections_failed", "error": exc.code},
        )
        return _empty(conversation_id, SectionsStatus.ERROR, exc.message)
    if snapshot is None:
        return _empty(conversation_id, SectionsStatus.MISSING, "no snapshot has been fetched yet")
    age = max(0.0, now - snapshot.fetched_at)
    stale = age >= settings.representation_ttl_s
    budget = max(0, settings.context_tokens - RENDER_OVERHEAD_TOKENS)
    long_term, honcho_text = _fit(snapshot.representation.strip(), _honcho_text(snapshot), budget)
    result = Sections(
        conversation_id=conversation_id,
        status=SectionsStatus.STALE if stale else SectionsStatus.FRESH,
        stale=stale,
        fetched_at=snapshot.fetched_at,
        age_s=age,
        sections=[_section(LONG_TERM, *long_term), _section(HONCHO, *honcho_text)],
    )
    result.tokens = estimate_tokens(result.render())
    return result


def _section(name: str, text: str, truncated: bool) -> Section:
    return Section(name=name, text=text, tokens=estimate_tokens(text), truncated=truncated)


def _honcho_text(snapshot: Snapshot) -> str:
    parts: list[str] = []
    if snapshot.summary and snapshot.summary.strip():
        parts.append("Summary of this conversation:\n" + snapshot.summary.strip())
    card = [line.strip() for line in snapshot.peer_card or [] if line.strip()]
    if card:
        parts.append("What is known about the user:\n" + "\n".join(f"- {c}" for c in card))
    return "\n\n".join(parts)


def _fit(first: str, second: str, budget: int) -> tuple[tuple[str, bool], tuple[str, bool]]:
    """Both texts within ``budget`` tokens: each gets half, and what one leaves the other."""
    need_a, need_b = estimate_tokens(first), estimate_tokens(second)
    give_a = min(need_a, max(budget // 2, budget - need_b))
    give_b = min(need_b, budget - give_a)
    return _cut(first, give_a), _cut(second, give_b)


def _cut(text: str, tokens: int) -> tuple[str, bool]:
    """``text`` within ``tokens``, cut at a line or word boundary and marked when cut."""
    limit = tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text, False
    room = limit - len(TRUNCATED)
    if room <= 0:
        return "", True
    head = text[:room]
    boundary = max(head.rfind("\n"), head.rfind(" "))
    if boundary >= room // 2:
        head = head[:boundary]
    return head.rstrip() + TRUNCATED, True
