"""Settings and the API key, read live at every use, strictly.

Precedence, highest first: command-line flags (``--config-dir``, ``--data-dir``,
``--log-format``), ``MEMHONCHO_<KEY>`` environment variables, ``<config_dir>/settings/
memhoncho.json``, the defaults below. A changed file applies at the next call. A settings or
secrets file that does not parse, an unknown key (the nearest known one is suggested), a value
of the wrong type or range, or a URL of an unknown scheme is ``ConfigError`` naming the file or
variable, the key and the reason: nothing runs under settings that were not read. The API key
is the stored secret (``<config_dir>/secrets.json``, section ``api-key``) first, then
``MEMHONCHO_API_KEY``, then the file named by ``api_key_file`` (``MEMHONCHO_API_KEY_FILE``: a
container secret such as ``/run/secrets/honcho_api_key``).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memhoncho import dirs
from memhoncho.settings import files
from memhoncho.settings.files import RACY_S as RACY_S
from memhoncho.settings.files import secret_file as secret_file
from memhoncho.settings.values import check_pattern

log = logging.getLogger(__name__)

SETTINGS_FILE = Path("settings") / "memhoncho.json"
SECRETS_FILE = "secrets.json"
API_KEY_SECTION = "api-key"
ENV_PREFIX = "MEMHONCHO_"


class Settings(BaseModel):
    """Every setting, with its default. Units are in the names."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    workspace_id: str = Field("memhoncho", pattern=r"^[A-Za-z0-9_-]{1,512}$")
    agent_peer_id: str = Field("agent", pattern=r"^[A-Za-z0-9_-]{1,512}$")
    base_url: str = Field("http://127.0.0.1:8000", min_length=1)
    context_tokens: int = Field(1200, ge=50, le=100_000)
    max_message_length: int = Field(25_000, ge=100, le=25_000)
    search_limit: int = Field(8, ge=1, le=100)
    tool_preview_length: int = Field(500, ge=20, le=25_000)
    representation_ttl_s: int = Field(600, ge=0)
    outbox_retention_days: int = Field(30, ge=1)
    delivered_batch_window: int = Field(200, ge=10)
    anchor_window: int = Field(1000, ge=10)
    partitions: int = Field(8, ge=1, le=256)
    broker_url: str | None = None
    max_batch_bytes: int = Field(1024 * 1024, ge=1024)
    max_pending_batches: int = Field(10_000, ge=1)
    #: seconds a Honcho request may take as a whole (pool, connect, send, answer: one deadline)
    honcho_timeout_s: float = Field(30.0, gt=0)
    #: after a send's start + honcho_timeout_s, how long Honcho may still commit it (the fence)
    send_settle_s: float = Field(30.0, ge=0)
    #: False turns the fence off: only to show what it prevents (duplicates), never in use
    send_fence: bool = True
    chat_timeout_s: float = Field(120.0, gt=0)
    tool_timeout_s: float = Field(30.0, gt=0)
    fork_wait_s: float = Field(600.0, ge=0)
    sweep_interval_s: float = Field(900.0, gt=0)
    refresh_interval_s: float = Field(600.0, gt=0)
    status_token: str | None = None
    #: files holding the API key and the status token (compose ``secrets:``), read live
    api_key_file: str | None = None
    status_token_file: str | None = None
    #: a file holding the broker's password (compose ``secrets:``), put into ``broker_url``
    #: when that URL names none, so no password sits in the environment or a settings file
    broker_password_file: str | None = None
    #: regular expressions redacted at capture besides the defaults (``redaction.py``); in the
    #: environment, a JSON list. A pattern that does not compile makes the whole setting
    #: invalid (named by doctor, defaults kept), never a crash at capture.
    redact_patterns: tuple[str, ...] = Field((), max_length=100)

    @field_validator("redact_patterns", mode="before")
    @classmethod
    def _patterns_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):  # from MEMHONCHO_REDACT_PATTERNS
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("must be a JSON list of regular expressions") from None
        return value

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            check_pattern(pattern)
        return value

    @field_validator("broker_url", "store_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, value: str | None) -> str | None:
        return _url(value, BROKER_SCHEMES, "a Redis or RabbitMQ URL")

    @model_validator(mode="after")
    def _broker_password(self) -> Settings:
        """``broker_url`` with the password of ``broker_password_file`` (when it names none)."""
        password = secret_file(self.broker_password_file)
        if self.broker_url and password:
            object.__setattr__(self, "broker_url", with_password(self.broker_url, password))
        return self

    @field_validator("base_url")
    @classmethod
    def _honcho_scheme(cls, value: str) -> str:
        return _url(value, ("http", "https"), "Honcho's http(s) URL") or value

    @field_validator("store_url")
    @classmethod
    def _store_scheme(cls, value: str | None) -> str | None:
        _url(value, STORE_SCHEMES, "unset (files) or a postgresql:// URL")
        if value is not None and any(_missing(m) for m in POSTGRES_MODULES):
            raise ValueError(
                "a PostgreSQL store needs the postgres extra: pip install 'memhoncho[postgres]'"
            )
        return value

    log_format: str = Field("text", pattern=r"^(text|json)$")  # json: one JSON object a line
    #: where the durable state lives: unset means the data directory's files (one machine);
    #: ``postgresql://user@host/db`` means that database (many machines; README "Scaling")
    store_url: str | None = None  # checked by store.open_store: a bad one is an error
    #: seconds to connect to the store's database before a call fails with StoreUnavailable
    store_timeout_s: float = Field(2.0, gt=0, le=60)


BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp")
STORE_SCHEMES = ("postgresql", "postgres")
POSTGRES_MODULES = ("psycopg", "psycopg_pool")  #: what the ``postgres`` extra installs
#: settings whose value ``config show`` masks (URLs show all but their password)
SECRET_KEYS = frozenset({"status_token"})


def _missing(module: str) -> bool:
    """Whether ``module`` cannot be imported (not installed, or blocked in ``sys.modules``)."""
    if module in sys.modules:
        return sys.modules[module] is None
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _url(value: str | None, schemes: tuple[str, ...], wanted: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in schemes or not (parts.netloc or parts.path):
        shown = f"{parts.scheme}://" if "://" in value else "no scheme"
        raise ValueError(f"must be {wanted} ({', '.join(schemes)}), not {shown}")
    return value


DEFAULTS = Settings()
FIELDS = Settings.model_fields


def config_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_CONFIG_DIR``, else ``~/.config/memhoncho`` (``dirs.py``)."""
    return Path(dirs.config_dir(explicit))


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_DATA_DIR``, else ``~/.local/share/memhoncho`` (``dirs.py``)."""
    return Path(dirs.data_dir(explicit))


_paths: dict[str, tuple[Path, Path, Path]] = {}


def _files(config: str | os.PathLike[str] | None) -> tuple[Path, Path, Path]:
    """The config dir, its settings file and its secrets file (built once per explicit dir)."""
    if config is None:  # follows MEMHONCHO_CONFIG_DIR, which may change
        cfg = config_dir(None)
        return cfg, cfg / SETTINGS_FILE, cfg / SECRETS_FILE
    name = os.fspath(config)
    paths = _paths.get(name)
    if paths is None:
        cfg = config_dir(name)
        paths = _paths[name] = (cfg, cfg / SETTINGS_FILE, cfg / SECRETS_FILE)
    return paths


_ENV_NAMES = tuple(ENV_PREFIX + name.upper() for name in FIELDS)


@functools.cache
def _env_keys() -> tuple[Any, ...]:
    """The names as ``os.environ`` keys its dict (bytes on POSIX)."""
    return tuple(os.environ.encodekey(name) for name in _ENV_NAMES)


def _env_stamp() -> tuple[object, ...]:
    """The settings' environment variables now, as a cache key. ``load`` runs on every capture
    and ``os.environ.get`` decodes and raises per missing name (about 70 us for 30 names), so
    this reads the dict behind ``os.environ``, which every change through it updates."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):  # not CPython's os.environ: the slow, public way
        return tuple(os.environ.get(name) for name in _ENV_NAMES)
    return tuple(map(data.get, _env_keys()))


def sources(config: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Where each setting given anywhere comes from: the file's path or the variable's name
    (``memhoncho config show``; the rest are defaults)."""
    _, settings_file, _ = _files(config)
    found = {
        k: str(settings_file) for k in files.read_json_cached(settings_file).value if k in FIELDS
    }
    for name in FIELDS:
        if os.environ.get(ENV_PREFIX + name.upper()) is not None:
            found[name] = ENV_PREFIX + name.upper()
    return found


def _raw_values(cfg: Path, in_file: dict[str, Any] | None = None) -> dict[str, Any]:
    if in_file is None:
        in_file = files.read_json_cached(cfg / SETTINGS_FILE).value
    values = {k: v for k, v in in_file.items() if k in FIELDS}
    for name in FIELDS:
        env = os.environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = env
    return values


#: per config dir: the (file generations, environment) read, and the settings or the refusal
_loaded: dict[Path, tuple[tuple[object, ...], Settings | tuple[str, dict[str, Any]]]] = {}


def load(config: str | os.PathLike[str] | None = None) -> Settings:
    """The settings now, or ``ConfigError`` naming the file or variable, key and reason.

    Live: the files' stat and the environment are checked at every call; only an unchanged
    file and environment reuse the last result (a refusal too: it is raised again).
    """
    cfg, settings_file, secrets_file = _files(config)
    read = files.read_json_cached(settings_file)
    secrets = files.read_json_cached(secrets_file)
    key = (read.generation, secrets.generation, _env_stamp())
    cached = _loaded.get(cfg)
    if cached is None or cached[0] != key:
        cached = (key, _validate(settings_file, read, secrets_file, secrets))
        _loaded[cfg] = cached
    outcome = cached[1]
    if isinstance(outcome, Settings):
        return outcome
    from memhoncho.errors import ConfigError

    message, details = outcome
    raise ConfigError(message, **details)


def _validate(
    settings_file: Path, read: files.Read, secrets_file: Path, secrets: files.Read
) -> Settings | tuple[str, dict[str, Any]]:
    """The settings, or the refusal's message and details (the first problem found)."""
    for path, problem in ((settings_file, read.problem), (secrets_file, secrets.problem)):
        if problem:
            return (
                f"{path} {problem}: fix the file or remove it",
                {"file": str(path), "reason": problem},
            )
    for name in read.value:
        if name not in FIELDS:
            near = difflib.get_close_matches(name, list(FIELDS), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            return (
                f"{settings_file}: unknown key {name!r}{hint}; the keys are listed in"
                " docs/configuration.md",
                {"file": str(settings_file), "key": name, "reason": "unknown key"},
            )
    values = _raw_values(settings_file.parent.parent, read.value)
    try:
        return Settings(**values)
    except ValidationError as exc:
        found: dict[str, tuple[str, str]] = {}  # key -> (where, reason), first error each
        for err in exc.errors():
            if err["loc"] and str(err["loc"][0]) not in found:
                name = str(err["loc"][0])
                reason = str(err["msg"]).removeprefix("Value error, ")
                variable = ENV_PREFIX + name.upper()
                where = variable if os.environ.get(variable) is not None else str(settings_file)
                found[name] = (where, reason[:1].lower() + reason[1:])
        first, (where, reason) = next(iter(found.items()))
        place = {"variable": where} if where.startswith(ENV_PREFIX) else {"file": where}
        listed = "; ".join(f"{w}: {k}: {r}" for k, (w, r) in found.items())
        return (
            f"{listed} (fix {'the file' if 'file' in place else 'or unset the variable'})",
            {**place, "key": first, "reason": reason, "keys": sorted(found)},
        )


def invalid_keys(config: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the settings whose value is invalid now (``memhoncho doctor``)."""
    _, settings_file, _ = _files(config)
    read = files.read_json_cached(settings_file)
    unknown = [name for name in read.value if name not in FIELDS]
    try:
        Settings(**_raw_values(config_dir(config), read.value))
    except ValidationError as exc:
        return sorted(unknown + list({str(err["loc"][0]) for err in exc.errors() if err["loc"]}))
    return sorted(unknown)


def api_key(config: str | os.PathLike[str] | None = None) -> str | None:
    """The Honcho API key: the stored secret, ``MEMHONCHO_API_KEY``, then ``api_key_file``."""
    stored = files.read_json_cached(_files(config)[2]).value.get(API_KEY_SECTION)
    if isinstance(stored, dict):
        stored = stored.get("value")
    if isinstance(stored, str) and stored.strip():
        return stored.strip()
    env = os.environ.get(ENV_PREFIX + "API_KEY", "").strip()
    if env:
        return env
    from memhoncho.errors import ConfigError

    try:
        named = load(config).api_key_file
    except ConfigError:  # refused where the settings are read; here it means no key
        return None
    return secret_file(named)


def problems(config: str | os.PathLike[str] | None = None) -> list[str]:
    """Each settings or secrets file that exists but cannot be used now, with the reason.

    ``load`` and ``api_key`` read such a file as empty (defaults, no key) so that a broken
    file never crashes a worker; this is how doctor and status find out that it happened.
    """
    _, settings_file, secrets_file = _files(config)
    found = []
    for path in (settings_file, secrets_file):
        problem = files.read_json_cached(path).problem
        if problem:
            found.append(f"{path} {problem}")
    return found


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in its user part, unless it has one (``redis://:pw@host``,
    ``amqp://user:pw@host``); the password percent-encoded."""
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password or not parts.hostname:
        return url
    user = parts.username or ""
    netloc = f"{user}:{quote(password, safe='')}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc))
