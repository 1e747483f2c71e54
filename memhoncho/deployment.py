"""Where memhoncho's files and settings are, for one host, worker or beat process, and the
data directory's identity (written when it is initialised; a folder without one is refused).

Settings and the API key are read live through this object at each use, never cached.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from memhoncho import dirs
from memhoncho import settings as settings_module
from memhoncho.errors import ConfigError, MemhonchoError, MissingApiKey, NotInitialised
from memhoncho.settings import Settings
from memhoncho.store.layout import Layout
from memhoncho.store.modes import make_dirs, open_file

if TYPE_CHECKING:
    from memhoncho.honcho.adapter import HonchoTarget
    from memhoncho.store.base import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deployment:
    config_dir: Path
    data_dir: Path
    layout: Layout = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", Layout(self.data_dir))

    @classmethod
    def from_dirs(
        cls,
        config_dir: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> Deployment:
        """Explicit dirs, else ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR``, else defaults."""
        return cls(settings_module.config_dir(config_dir), settings_module.data_dir(data_dir))

    def settings(self) -> Settings:
        return settings_module.load(self.config_dir)

    def store(self) -> Store:
        """Where the durable state is: the data directory's files, or ``store_url``'s database.

        Built once per process and place (``store.open_store``); ConfigError for a bad URL.
        """
        from memhoncho.store import open_store

        current = self.settings()
        return open_store(self.data_dir, current.store_url, current.store_timeout_s)

    def fingerprint(self) -> dict[str, Any]:
        """What a worker serves, published in its Celery conf (``memhoncho doctor`` and
        ``status`` compare it with ``serves_another``): the data directory, its identity, and
        the store (a URL without its password)."""
        current = self.settings()
        store = "files"
        if current.store_url:
            parts = urlsplit(current.store_url)
            store = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
        try:
            found = identity(self.data_dir)
        except ConfigError:
            found = None
        return {
            "data_dir": str(self.data_dir.absolute()),
            "deployment_id": found and found["deployment_id"],
            "store": store,
        }

    def hint_identity(self) -> str | None:
        """What a delivery hint carries and a worker compares (``worker/foreign.py``): the data
        directory's identity on the file store (None before it has one); on PostgreSQL the
        database's own (``Store.deployment_id``), not its URL, which differs from machine to
        machine; None while the database is out of reach."""
        if self.settings().store_url:
            try:
                return self.store().deployment_id()
            except MemhonchoError:
                return None
        try:
            found = identity(self.data_dir)
        except ConfigError:
            return None
        return str(found["deployment_id"]) if found else None

    def api_key(self) -> str | None:
        return settings_module.api_key(self.config_dir)

    def honcho_target(self, timeout_s: float | None = None) -> HonchoTarget:
        """Where and as whom to call Honcho now; MissingApiKey when no key is configured."""
        from memhoncho.honcho.adapter import HonchoTarget

        key = self.api_key()
        if key is None:
            raise MissingApiKey()
        current = self.settings()
        return HonchoTarget(
            base_url=current.base_url,
            api_key=key,
            workspace_id=current.workspace_id,
            timeout_s=timeout_s or current.honcho_timeout_s,
        )


def serves_another(ours: dict[str, Any], theirs: Any) -> str | None:
    """Why a worker whose fingerprint is ``theirs`` serves another deployment than the one of
    fingerprint ``ours`` (its store, or its data directory), or None: the same deployment, or
    a worker too old to publish a fingerprint (nothing to compare).

    One database is one deployment, whatever data directory each machine has. On the files,
    the identity decides where both have one: the same volume mounted at another path (a host
    outside compose) is this deployment, another volume at the same path is not.
    """
    if not isinstance(theirs, dict):
        return None
    if theirs.get("store") != ours["store"]:
        return f"store {theirs.get('store')}"
    if ours["store"] != "files":
        return None
    mine, other = ours.get("deployment_id"), theirs.get("deployment_id")
    if mine and other:
        return None if mine == other else f"data directory {theirs.get('data_dir')} ({other})"
    if theirs.get("data_dir") != ours["data_dir"]:
        return f"data directory {theirs.get('data_dir')}"
    return None


# ---- the data directory's identity ---------------------------------------------------------

#: written once when a data directory is initialised; a folder without it is not memhoncho's
IDENTITY_FILE = "memhoncho-deployment.json"
#: what a data directory made before identities holds: adopted as memhoncho's, not refused
_LEGACY_MARKS = ("data/outbox", "state/ledger", "state/relay.sock")


def identity(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The data directory's identity (``deployment_id``, ``created_at``, ``data_dir``), or None
    when it has none; ConfigError when the path is not a directory or the file is unreadable."""
    root = Path(data_dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"the data directory {root} is a file: give --data-dir a folder")
    try:
        value = json.loads((root / IDENTITY_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{root / IDENTITY_FILE} cannot be read ({type(exc).__name__}): restore it from"
            " a backup, or remove it and run memhoncho init"
        ) from None
    if not isinstance(value, dict) or not isinstance(value.get("deployment_id"), str):
        raise ConfigError(f"{root / IDENTITY_FILE} is not a memhoncho identity: remove it and init")
    return value


def initialise(data_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], bool]:
    """The data directory's identity, written now if it had none: (identity, whether written).

    Written to a temporary file, fsynced and linked into place, so two processes initialising
    at once agree on one identity (the loser reads the winner's).
    """
    found = identity(data_dir)
    if found is not None:
        return found, False
    root = Path(data_dir)
    make_dirs(root)
    made = {
        "deployment_id": uuid.uuid4().hex,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "data_dir": str(root.absolute()),
    }
    temporary = root / f".{IDENTITY_FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    descriptor = open_file(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with open(descriptor, "w", encoding="utf-8") as handle:
        json.dump(made, handle)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, root / IDENTITY_FILE)
    except FileExistsError:
        return identity(root) or made, False
    finally:
        temporary.unlink()
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return made, True


def require_initialised(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The identity of an initialised data directory; NotInitialised for any other folder (a
    mistyped one is refused, never created). One made before identities is adopted."""
    found = identity(data_dir)
    if found is not None:
        return found
    root = Path(data_dir)
    if any((root / mark).exists() for mark in _LEGACY_MARKS):
        made, written = initialise(root)
        if written:
            log.info("data directory adopted", extra={"action": "data_dir_adopted"})
        return made
    raise NotInitialised(
        f"{root} is not an initialised memhoncho data directory (no {IDENTITY_FILE}): check"
        " --data-dir or MEMHONCHO_DATA_DIR, or initialise it with memhoncho init"
        " (capture: --init; Host: init=True)",
        data_dir=str(root),
    )


def open_data_dir(data_dir: str | os.PathLike[str], init: bool | None = None) -> dict[str, Any]:
    """The identity of the data directory a process is about to use: the one rule for ``Host``,
    ``memhoncho mcp``, the integrations and every command.

    ``init`` True initialises it (``memhoncho init``, ``--init``); False refuses a folder that
    is not initialised; None (the default) creates only the default location on first use (the
    zero-configuration start), and refuses a folder named by an argument, a flag or
    ``MEMHONCHO_DATA_DIR``: a mistyped name would otherwise swallow captures no worker reads.
    Refused: ``NotInitialised``, and nothing is created.
    """
    if init is None:
        init = is_default_data_dir(data_dir)
    if not init:
        return require_initialised(data_dir)
    found, written = initialise(data_dir)
    if written:
        log.info(
            "data directory initialised",
            extra={
                "action": "data_dir_initialised",
                "data_dir": str(Path(data_dir).absolute()),
                "deployment_id": found["deployment_id"],
            },
        )
    return found


def is_default_data_dir(data_dir: str | os.PathLike[str]) -> bool:
    """Whether ``data_dir`` is the default location (``dirs.default_data_dir``), however it is
    spelt: named by a flag or ``MEMHONCHO_DATA_DIR``, through a link, with a ``~``."""
    default = Path(dirs.default_data_dir()).expanduser().resolve()
    return Path(data_dir).expanduser().resolve() == default
