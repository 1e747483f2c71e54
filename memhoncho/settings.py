"""Settings and the API key, read live at every use.

Values come from ``<config_dir>/settings/memhoncho.json``, overridden by ``MEMHONCHO_<KEY>``
environment variables. A changed file applies at the next call; an invalid value is refused
by key name and falls back to its default with a warning, never a crash. The API key is the
stored secret (``<config_dir>/secrets.json``, section ``api-key``) first, then
``MEMHONCHO_API_KEY``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    honcho_timeout_s: float = Field(30.0, gt=0)
    chat_timeout_s: float = Field(120.0, gt=0)
    tool_timeout_s: float = Field(30.0, gt=0)
    fork_wait_s: float = Field(600.0, ge=0)
    sweep_interval_s: float = Field(900.0, gt=0)
    refresh_interval_s: float = Field(600.0, gt=0)
    status_token: str | None = None


DEFAULTS = Settings()
FIELDS = Settings.model_fields


def config_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_CONFIG_DIR``, else ``~/.config/memhoncho``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("MEMHONCHO_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".config" / "memhoncho"


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Explicit, else ``MEMHONCHO_DATA_DIR``, else ``~/.local/share/memhoncho``."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("MEMHONCHO_DATA_DIR")
    return Path(env) if env else Path.home() / ".local" / "share" / "memhoncho"


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("cannot read %s (%s); using defaults", path, type(exc).__name__)
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        log.warning("%s is not valid JSON; using defaults", path)
        return {}
    if not isinstance(value, dict):
        log.warning("%s is not a JSON object; using defaults", path)
        return {}
    return value


def _raw_values(cfg: Path) -> dict[str, Any]:
    values = {k: v for k, v in _read_json_object(cfg / SETTINGS_FILE).items() if k in FIELDS}
    for name in FIELDS:
        env = os.environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = env
    return values


def load(config: str | os.PathLike[str] | None = None) -> Settings:
    """Read the settings now. Each invalid key is named in a warning and takes its default."""
    values = _raw_values(config_dir(config))
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
    """The Honcho API key: the stored secret first, then ``MEMHONCHO_API_KEY``; None if neither."""
    stored = _read_json_object(config_dir(config) / SECRETS_FILE).get(API_KEY_SECTION)
    if isinstance(stored, dict):
        stored = stored.get("value")
    if isinstance(stored, str) and stored.strip():
        return stored.strip()
    env = os.environ.get(ENV_PREFIX + "API_KEY", "").strip()
    return env or None
