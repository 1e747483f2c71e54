"""Write a memhoncho config dir the way an operator would, for tests and the demo."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memhoncho.settings import API_KEY_SECTION, SECRETS_FILE, SETTINGS_FILE

if TYPE_CHECKING:
    from memhoncho.testing.standin import HonchoStandIn

#: the ``standin_settings`` fixture: ``point_at_standin`` with the test's dirs and stand-in
SettingsWriter = Callable[..., dict[str, Any]]


def write_settings(config_dir: Path, **values: Any) -> Path:
    """Replace ``<config_dir>/settings/memhoncho.json`` with ``values``."""
    path = config_dir / SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def write_api_key(config_dir: Path, key: str) -> Path:
    """Store ``key`` as the Honcho API key in ``<config_dir>/secrets.json``, readable by its
    owner only (as ``memhoncho init --api-key-stdin`` writes it; doctor fails on any other)."""
    path = config_dir / SECRETS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({API_KEY_SECTION: key}), encoding="utf-8")
    path.chmod(0o600)
    return path


def point_at_standin(
    config_dir: Path, standin: HonchoStandIn, workspace_id: str, api_key: str, **values: Any
) -> dict[str, Any]:
    """Settings that send to ``standin``'s ``workspace_id`` (plus ``values``), and the key.
    Returns the settings written."""
    settings: dict[str, Any] = {"base_url": standin.url, "workspace_id": workspace_id, **values}
    write_settings(config_dir, **settings)
    write_api_key(config_dir, api_key)
    return settings
