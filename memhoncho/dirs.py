"""Where the config and data directories are: the one definition, light enough for the
``memhoncho capture`` fast path (``os`` only: no pathlib, no settings, no pydantic)."""

from __future__ import annotations

import os

CONFIG_ENV = "MEMHONCHO_CONFIG_DIR"
DATA_ENV = "MEMHONCHO_DATA_DIR"


def config_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    """Explicit, else ``MEMHONCHO_CONFIG_DIR``, else ``~/.config/memhoncho``."""
    if explicit is not None:
        return os.fspath(explicit)
    return os.environ.get(CONFIG_ENV) or os.path.join(
        os.path.expanduser("~"), ".config", "memhoncho"
    )


def data_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    """Explicit, else ``MEMHONCHO_DATA_DIR``, else ``~/.local/share/memhoncho``."""
    if explicit is not None:
        return os.fspath(explicit)
    env = os.environ.get(DATA_ENV)
    return env or os.path.join(os.path.expanduser("~"), ".local", "share", "memhoncho")


def capture_socket(data: str | os.PathLike[str]) -> str:
    """The relay's capture socket in a data directory (``store/layout.py`` names the rest)."""
    return os.path.join(os.fspath(data), "state", "capture.sock")
