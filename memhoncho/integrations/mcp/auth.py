"""Bearer tokens of ``memhoncho mcp --http``: each token names the one owner it acts for.

A tokens file holds ``<token> <owner>`` lines (``#`` comments and blank lines allowed); or one
token file serves ``--owner``. The operator chooses the tokens, memhoncho never invents one.
Files are re-read when they change, so a token added or revoked applies at the next request; a
file that stops parsing refuses every token until it is fixed (fail closed). The SDK's bearer
middleware asks ``OwnerTokens.verify_token`` and answers 401 for no token or a wrong one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from memhoncho import settings as settings_module
from memhoncho.errors import ConfigError, InvalidId, MemhonchoError
from memhoncho.integrations.mcp import scope
from memhoncho.settings.files import RACY_NS
from memhoncho.store.modes import exposed

log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16  # a shorter bearer token is refused at start


def _digest(token: str) -> str:
    """Tokens are looked up by digest: a wrong token's lookup reveals nothing of the right one."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """Token digest -> owner, from ``<token> <owner>`` lines; ConfigError naming the line."""
    owners: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        token, _, owner = line.partition(" ")
        owner = owner.strip()
        where = f"{source} line {number}"
        if not owner:
            raise ConfigError(f"{where}: expected '<token> <owner>'")
        _check_token(token, where)
        try:
            scope.check_owner(owner)
        except InvalidId as exc:
            raise ConfigError(f"{where}: owner: {exc.message}") from None
        digest = _digest(token)
        if owners.get(digest, owner) != owner:
            raise ConfigError(f"{where}: this token is already given to another owner")
        owners[digest] = owner
    if not owners:
        raise ConfigError(f"{source}: no '<token> <owner>' line")
    return owners


def _check_token(token: str, where: str) -> None:
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where}: a token must have at least {MIN_TOKEN_CHARS} characters")


@dataclass(frozen=True)
class _Read:
    stamp: tuple[int, int, int, int]
    owners: dict[str, str] | None  # None: the file did not parse; every token is refused


class OwnerTokens:
    """The owner of a bearer token, from a tokens file or one token file with its owner.

    Satisfies the SDK's ``TokenVerifier`` protocol (``verify_token``) without importing it.
    """

    def __init__(
        self,
        tokens_file: str | None = None,
        token_file: str | None = None,
        owner: str | None = None,
    ) -> None:
        if (tokens_file is None) == (token_file is None):
            raise ConfigError("--http needs --tokens-file, or --token-file with --owner")
        if token_file is not None and owner is None:
            raise ConfigError("--token-file needs --owner: every HTTP token acts for one owner")
        if tokens_file is not None and owner is not None:
            raise ConfigError("--owner goes with --token-file; a tokens file names the owners")
        self.tokens_file = Path(tokens_file) if tokens_file is not None else None
        self.token_file = token_file
        self.owner = owner
        self._lock = threading.Lock()
        self._read: _Read | None = None
        self.check()

    def check(self) -> None:
        """ConfigError, at start, when the file is missing, unreadable or malformed."""
        if self.tokens_file is not None:
            why = exposed(self.tokens_file)
            if why is not None:
                raise ConfigError(f"{self.tokens_file} holds the tokens and {why}: chmod 600 it")
            try:
                text = self.tokens_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    f"cannot read {self.tokens_file} ({type(exc).__name__})"
                ) from None
            parse_tokens(text, str(self.tokens_file))
            return
        assert self.token_file is not None and self.owner is not None
        why = exposed(self.token_file)
        if why is not None:
            raise ConfigError(f"{self.token_file} holds the token and {why}: chmod 600 it")
        token = settings_module.secret_file(self.token_file)
        if token is None:
            raise ConfigError(f"{self.token_file}: no token (missing, unreadable or empty)")
        _check_token(token, self.token_file)
        try:
            scope.check_owner(self.owner)
        except InvalidId as exc:
            raise ConfigError(f"--owner: {exc.message}") from None

    def owner_of(self, token: str) -> str | None:
        """The owner ``token`` acts for; None for a token that is not one of these."""
        if self.token_file is not None:
            expected = settings_module.secret_file(self.token_file)
            if expected is None or len(expected) < MIN_TOKEN_CHARS:
                return None
            return self.owner if _digest(token) == _digest(expected) else None
        return (self._owners() or {}).get(_digest(token))

    def _owners(self) -> dict[str, str] | None:
        assert self.tokens_file is not None
        try:
            st = os.stat(self.tokens_file)
        except OSError:
            return None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            # A stamp as new as the clock's grain may hide a second write: read again.
            settled = stamp[3] < time.time_ns() - RACY_NS
            if self._read is not None and self._read.stamp == stamp and settled:
                return self._read.owners
            try:
                owners: dict[str, str] | None = parse_tokens(
                    self.tokens_file.read_text(encoding="utf-8"), str(self.tokens_file)
                )
            except (OSError, UnicodeDecodeError, MemhonchoError) as exc:
                log.warning(
                    "the MCP tokens file does not parse; every token is refused until it does",
                    extra={"action": "mcp_tokens_refused", "error": type(exc).__name__},
                )
                owners = None
            self._read = _Read(stamp, owners)
            return owners

    async def verify_token(self, token: str) -> object | None:
        """The SDK's access token for ``token`` (subject: its owner), or None: a 401."""
        from mcp.server.auth.provider import AccessToken

        owner = self.owner_of(token)
        if owner is None:
            return None
        # client_id tells owners apart in the SDK's session ownership check; subject is the owner.
        return AccessToken(token=token, client_id=scope.owner_tag(owner), scopes=[], subject=owner)


def request_owner() -> str:
    """The owner of the HTTP request being served, from the token the SDK verified."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    access = get_access_token()
    if access is None or access.subject is None:  # the SDK answered 401 before this
        raise MemhonchoError("memhoncho mcp: the request carries no verified token")
    return access.subject
