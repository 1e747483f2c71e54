"""Where the config and data directories are: the one definition, light enough for the fast
path of ``memhoncho capture`` and ``status`` (``os`` only: no pathlib, settings or pydantic)."""

from __future__ import annotations

import os

CONFIG_ENV = "MEMHONCHO_CONFIG_DIR"
DATA_ENV = "MEMHONCHO_DATA_DIR"


def config_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    """Explicit, else ``MEMHONCHO_CONFIG_DIR``, else ``~/.config/memhoncho``.

    A leading ``~`` is the home folder: a desktop client passes its settings' environment
    without a shell to expand it."""
    if explicit is not None:
        return os.path.expanduser(os.fspath(explicit))
    named = os.environ.get(CONFIG_ENV)
    if named:
        return os.path.expanduser(named)
    return os.path.join(os.path.expanduser("~"), ".config", "memhoncho")


def data_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    """Explicit, else ``MEMHONCHO_DATA_DIR``, else ``~/.local/share/memhoncho`` (a leading
    ``~`` expanded, as for ``config_dir``)."""
    if explicit is not None:
        return os.path.expanduser(os.fspath(explicit))
    named = os.environ.get(DATA_ENV)
    return os.path.expanduser(named) if named else default_data_dir()


def default_data_dir() -> str:
    """``~/.local/share/memhoncho``: the one data directory created on first use (a folder
    named by an argument, a flag or ``MEMHONCHO_DATA_DIR`` must be initialised already)."""
    return os.path.join(os.path.expanduser("~"), ".local", "share", "memhoncho")


def relay_socket(data: str | os.PathLike[str]) -> str:
    """The relay's socket in a data directory (``store/layout.py`` names the rest)."""
    return os.path.join(os.fspath(data), "state", "relay.sock")
