"""Whose conversation a name means: an MCP client names it, the server files it under its owner.

Behind one HTTP server many owners share one data directory, and a model picks conversation
ids freely, so two owners' ``work`` must never be one conversation (one outbox, one Honcho
session, one prompt snapshot). The stored id is ``<owner tag>:<conversation>``; the tag is the
owner's Honcho peer id (``[A-Za-z0-9_-]``, so the first ``:`` ends it), or ``~`` and a digest
of it when that is long. stdio stores the same way, so both transports see one owner's memory.

Names that reach a terminal, a log or a file name are checked here, for conversation ids and
owners alike: no control character (an ANSI escape starts with one), and no format character
(bidi overrides, zero-width spaces and joiners), which would make two ids that look the same.
"""

from __future__ import annotations

import hashlib

from memhoncho import ids
from memhoncho.errors import InvalidId

#: characters a client's conversation id may have: every tool's schema says so, and scoped
#: checks it (server.tools puts it in each tool's schema)
MAX_CONVERSATION_CHARS = 128
MAX_TAG_CHARS = 64  # a longer peer id is tagged by its digest; tag + ":" + id <= 256
TAG_DIGEST_CHARS = 40  # hex characters of that digest
SEPARATOR = ":"


def check_owner(owner: object) -> str | None:
    """``owner`` as the server takes it (None: the ownerless user); InvalidId otherwise."""
    if owner is None:
        return None
    if not isinstance(owner, str) or not 1 <= len(owner) <= ids.MAX_INPUT_LEN:
        raise InvalidId(f"owner must be 1..{ids.MAX_INPUT_LEN} characters")
    if owner.strip() != owner:
        raise InvalidId("owner must not be blank or padded with whitespace")
    ids.check_characters(owner, "owner")
    return owner


def owner_tag(owner: str | None) -> str:
    """The prefix of ``owner``'s conversations (the ownerless user's is ``user``)."""
    peer = ids.peer_id(owner)
    if len(peer) <= MAX_TAG_CHARS:
        return peer
    return "~" + hashlib.sha256(peer.encode()).hexdigest()[:TAG_DIGEST_CHARS]


def scoped(owner: str | None, conversation: object) -> str:
    """The stored id of ``owner``'s ``conversation``; InvalidId for a bad conversation id."""
    if isinstance(conversation, str) and len(conversation) > MAX_CONVERSATION_CHARS:
        raise InvalidId(f"conversation id must be 1..{MAX_CONVERSATION_CHARS} characters")
    ids.conversation_key(conversation)  # blank, padded, control characters: InvalidId
    assert isinstance(conversation, str)  # conversation_key refused anything else
    ids.check_characters(conversation, "conversation id")
    return f"{owner_tag(owner)}{SEPARATOR}{conversation}"


def unscoped(owner: str | None, stored: str | None) -> str | None:
    """The client's name of a stored conversation id of ``owner`` (others are left as they are)."""
    prefix = owner_tag(owner) + SEPARATOR
    if stored is not None and stored.startswith(prefix):
        return stored[len(prefix) :]
    return stored
