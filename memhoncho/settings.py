"""Settings and the API key, read live at every use.

Values come from ``<config_dir>/settings/memhoncho.json``, overridden by ``MEMHONCHO_<KEY>``
environment variables. A changed file applies at the next call; an invalid value is refused
by key name and falls back to its default with a warning, never a crash. The API key is the
stored secret (``<config_dir>/secrets.json``, section ``api-key``) first, then
``MEMHONCHO_API_KEY``, then the file named by ``api_key_file`` (``MEMHONCHO_API_KEY_FILE``: a
container secret such as ``/run/secrets/honcho_api_key``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memhoncho import dirs
from memhoncho.capture.redaction import check_pattern

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

    log_format: str = Field("text", pattern=r"^(text|json)$")  # json: one JSON object a line
    #: where the durable state lives: unset means the data directory's files (one machine);
    #: ``postgresql://user@host/db`` means that database (many machines; README "Scaling")
    store_url: str | None = None  # checked by store.open_store: a bad one is an error
    #: seconds to connect to the store's database before a call fails with StoreUnavailable
    store_timeout_s: float = Field(2.0, gt=0, le=60)


DEFAULTS = Settings()
FIELDS = Settings.model_fields


def config_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_CONFIG_DIR``, else ``~/.config/memhoncho`` (``dirs.py``)."""
    return Path(dirs.config_dir(explicit))


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_DATA_DIR``, else ``~/.local/share/memhoncho`` (``dirs.py``)."""
    return Path(dirs.data_dir(explicit))


RACY_S = 0.05  # seconds; a file changed this recently may change again within one mtime tick
RACY_NS = int(RACY_S * 1e9)


@dataclass(frozen=True)
class _Read:
    """One file's parsed content, and the stat it was read under."""

    stamp: tuple[int, int, int, int]  # inode, size, mtime and ctime in ns
    trusted: bool  # False while the file is too new to trust its stamp
    generation: int  # bumps at every real read, so a derived cache knows it is stale
    value: dict[str, Any]
    problem: str | None = None  #: why the file cannot be used (it then reads as {})


_reads: dict[Path, _Read] = {}
_generations = itertools.count(1)
_loaded: dict[Path, tuple[tuple[object, ...], Settings]] = {}


def _read_json_cached(path: Path) -> _Read:
    """The JSON object in ``path``, re-read only when its stat changes (so changes stay live).

    Timestamps are coarse (one kernel tick), so a file whose ctime is within ``RACY_S`` of the
    read is re-read next time too, as git does for its index: an in-place rewrite of the same
    size within one tick is never missed.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _MISSING
    except OSError:
        st = None
    if st is not None:
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = _reads.get(path)
        if cached is not None and cached.trusted and cached.stamp == stamp:
            return cached
        read_at_ns = time.time_ns()
    value, problem = _read_json_object(path)
    if st is None:
        return _Read((0, 0, 0, 0), False, next(_generations), value, problem)
    trusted = stamp[3] < read_at_ns - int(RACY_S * 1e9)
    fresh = _Read(stamp, trusted, next(_generations), value, problem)
    _reads[path] = fresh
    return fresh


_MISSING = _Read((0, 0, 0, 0), True, 0, {})
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


def _read_json_object(path: Path) -> tuple[dict[str, Any], str | None]:
    """The JSON object in ``path`` ({} when absent), and why it cannot be used, if it cannot."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        log.warning("cannot read %s (%s); using defaults", path, type(exc).__name__)
        return {}, f"cannot be read ({reason})"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        log.warning("%s is not valid JSON; using defaults", path)
        return {}, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(value, dict):
        log.warning("%s is not a JSON object; using defaults", path)
        return {}, f"is not a JSON object (it holds a JSON {_json_kind(value)})"
    return value, None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


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


def _raw_values(cfg: Path, in_file: dict[str, Any] | None = None) -> dict[str, Any]:
    if in_file is None:
        in_file = _read_json_cached(cfg / SETTINGS_FILE).value
    values = {k: v for k, v in in_file.items() if k in FIELDS}
    for name in FIELDS:
        env = os.environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = env
    return values


def load(config: str | os.PathLike[str] | None = None) -> Settings:
    """The settings now. Each invalid key is named in a warning and takes its default.

    Live: the file's stat and the environment are checked at every call; only an unchanged
    file and environment reuse the last result (and do not repeat its warnings).
    """
    cfg, settings_file, _ = _files(config)
    read = _read_json_cached(settings_file)
    key = (read.generation, _env_stamp())
    cached = _loaded.get(cfg)
    if cached is not None and cached[0] == key:
        return cached[1]
    current = _validate(_raw_values(cfg, read.value))
    _loaded[cfg] = (key, current)
    return current


def _validate(values: dict[str, Any]) -> Settings:
    try:
        return Settings(**values)
    except ValidationError as exc:
        bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
        for name in sorted(bad):
            log.warning("setting %r is invalid; using its default", name)
        return Settings(**{k: v for k, v in values.items() if k not in bad})


def invalid_keys(config: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the settings whose value is invalid now (``memhoncho doctor``)."""
    try:
        Settings(**_raw_values(config_dir(config)))
    except ValidationError as exc:
        return sorted({str(err["loc"][0]) for err in exc.errors() if err["loc"]})
    return []


def api_key(config: str | os.PathLike[str] | None = None) -> str | None:
    """The Honcho API key: the stored secret, ``MEMHONCHO_API_KEY``, then ``api_key_file``."""
    stored = _read_json_cached(_files(config)[2]).value.get(API_KEY_SECTION)
    if isinstance(stored, dict):
        stored = stored.get("value")
    if isinstance(stored, str) and stored.strip():
        return stored.strip()
    env = os.environ.get(ENV_PREFIX + "API_KEY", "").strip()
    if env:
        return env
    return secret_file(load(config).api_key_file)


_secret_files: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}


def secret_file(path: str | None) -> str | None:
    """The stripped content of a secret file; None when unset, missing, unreadable or blank.

    Re-read only when its stat changes, so a rotated secret applies at the next call. The
    content is never logged, and neither is the reason beyond the error's type.
    """
    if not path:
        return None
    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = _secret_files.get(path)
        if cached is not None and cached[0] == stamp and stamp[3] < time.time_ns() - RACY_NS:
            return cached[1]
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read the secret file %s (%s)", path, type(exc).__name__)
        return None
    _secret_files[path] = (stamp, value)
    return value


def problems(config: str | os.PathLike[str] | None = None) -> list[str]:
    """Each settings or secrets file that exists but cannot be used now, with the reason.

    ``load`` and ``api_key`` read such a file as empty (defaults, no key) so that a broken
    file never crashes a worker; this is how doctor and status find out that it happened.
    """
    _, settings_file, secrets_file = _files(config)
    found = []
    for path in (settings_file, secrets_file):
        problem = _read_json_cached(path).problem
        if problem:
            found.append(f"{path} {problem}")
    return found
