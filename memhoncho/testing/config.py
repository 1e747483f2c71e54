"""Write a memhoncho config dir the way an operator would, for tests and the demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memhoncho.settings import API_KEY_SECTION, SECRETS_FILE, SETTINGS_FILE


def write_settings(config_dir: Path, **values: Any) -> Path:
    """Replace ``<config_dir>/settings/memhoncho.json`` with ``values``."""
    path = config_dir / SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def write_api_key(config_dir: Path, key: str) -> Path:
    """Store ``key`` as the Honcho API key in ``<config_dir>/secrets.json``."""
    path = config_dir / SECRETS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({API_KEY_SECTION: key}), encoding="utf-8")
    return path
