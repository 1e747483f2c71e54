"""The one place where a conversation id or a user name becomes a file name or a Honcho id.

Honcho ids and memhoncho's file names use only ``[A-Za-z0-9_-]``. Letters, digits and ``_``
stay as they are; every other UTF-8 byte, ``-`` included, becomes ``-`` and two lowercase hex
digits, so the mapping is injective and reversible. A result longer than ``MAX_ENCODED_LEN``
becomes ``-h`` and a SHA-256 digest instead: no plain encoding starts with ``-h`` (``h`` is not
a hex digit), so the two forms never collide. No ``.`` or ``/`` can survive, so no path
traversal is possible.

An ownerless conversation (owner ``None``) has the peer ``user``, which is also the plain
encoding of the name ``"user"``: that one name is written ``-75ser`` instead (its first byte
escaped). The plain encoding never escapes a letter, so ``-75ser`` is no other name's id, and
no other name encodes to ``user``: distinct owners never share a peer, and every other name
keeps the id it always had. A user name of 1..256 characters maps; a conversation id that is
blank or padded is refused with InvalidId, and so is either that holds a control, unassigned
or invisible format character (``check_characters``: one rule on every surface).
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

from memhoncho.errors import InvalidId

MAX_INPUT_LEN = 256  # characters of a conversation id or user name
MAX_ENCODED_LEN = 200  # characters; keeps file names under the 255-byte limit
DEFAULT_USER = "user"  # the peer of an ownerless conversation (owner None)
# The peer of the literal name "user": a non-canonical escape no plain encoding produces.
NAMED_DEFAULT_USER = "-75" + DEFAULT_USER[1:]
CACHED_IDS = 4096  # recent ids whose mapping is remembered (they are short strings)

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
HONCHO_ID = re.compile(r"^[A-Za-z0-9_-]{1,512}$")


def _encode(value: str) -> str:
    out: list[str] = []
    for byte in value.encode("utf-8"):
        out.append(chr(byte) if byte in _SAFE else f"-{byte:02x}")
    encoded = "".join(out)
    if len(encoded) > MAX_ENCODED_LEN:
        return "-h" + hashlib.sha256(value.encode("utf-8")).hexdigest()
    return encoded


def _check_length(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidId(f"{what} must be a string")
    if not 1 <= len(value) <= MAX_INPUT_LEN:
        raise InvalidId(f"{what} must be 1..{MAX_INPUT_LEN} characters")
    return value


def _check_user_name(value: object) -> str:
    """A name of 1..256 characters of visible text maps (``check_characters``)."""
    name = _check_length(value, "user name")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidId("user name is not valid Unicode (lone surrogate)") from None
    check_characters(name, "user name")
    return name


def _check(value: object, what: str) -> str:
    value = _check_length(value, what)
    if value.strip() != value or not value.strip():
        raise InvalidId(f"{what} must not be blank or padded with whitespace")
    check_characters(value, what)
    return value


def check_characters(value: str, what: str) -> None:
    """The one character rule of every id on every surface (``Host``, the CLI, MCP): no
    control, unassigned or line-separating character, and no invisible format character (a
    bidi control could show one name as another; a zero-width space or a BOM makes two names
    look alike; the joiners too, which no id needs)."""
    for ch in value:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cs", "Cn", "Zl", "Zp"):
            raise InvalidId(f"{what} contains a control or unassigned character")
        if category == "Cf":
            raise InvalidId(
                f"{what} contains an invisible format character (bidi control, zero-width, BOM)"
            )


def conversation_key(conversation_id: object) -> str:
    """The file-name-safe key of a conversation (outbox, ledger, cache, fork files)."""
    if type(conversation_id) is str:  # a str subclass could hash or compare unlike its value
        return _conversation_key(conversation_id)
    return _encode(_check(conversation_id, "conversation id"))


def peer_id(user_name: object) -> str:
    """The Honcho peer id of a user; ``None`` (an ownerless conversation) is ``user``.

    The name ``"user"`` is ``-75ser``, so it never shares the ownerless peer.
    """
    if user_name is None:
        return DEFAULT_USER
    if type(user_name) is str:
        return _peer_id(user_name)
    name = _check_user_name(user_name)
    return NAMED_DEFAULT_USER if name == DEFAULT_USER else _encode(name)


# Pure functions of a string, called several times per capture: remember the recent ones.
# A refusal raises, and raising is never cached.
@functools.lru_cache(maxsize=CACHED_IDS)
def _conversation_key(conversation_id: str) -> str:
    return _encode(_check(conversation_id, "conversation id"))


@functools.lru_cache(maxsize=CACHED_IDS)
def _peer_id(user_name: str) -> str:
    if user_name == DEFAULT_USER:
        return NAMED_DEFAULT_USER
    return _encode(_check_user_name(user_name))


def session_id(workspace_id: str, conversation_id: object) -> str:
    """The Honcho session id: unique per workspace, since Honcho's clone ignores workspaces."""
    tag = hashlib.sha256(workspace_id.encode("utf-8")).hexdigest()[:10]
    return f"mh{tag}_{conversation_key(conversation_id)}"


def decode(key: str) -> str | None:
    """The original id of a plain key; None for a hashed key or one this module never makes."""
    if key == NAMED_DEFAULT_USER:
        return DEFAULT_USER
    if key.startswith("-h") or not HONCHO_ID.match(key):
        return None
    raw = bytearray()
    i = 0
    try:
        while i < len(key):
            if key[i] == "-":
                raw.append(int(key[i + 1 : i + 3], 16))
                i += 3
            else:
                raw.append(ord(key[i]))
                i += 1
        value = raw.decode("utf-8")
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    try:  # a key of characters no id may hold was never made here
        check_characters(value, "id")
    except InvalidId:
        return None
    # Only the canonical form decodes: "-2", "-41" (for "A") or "-C3-A9" are not ours.
    return value if _encode(value) == key else None
