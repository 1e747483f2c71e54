"""Where memhoncho's files and settings are, for one host, worker or beat process.

Settings and the API key are read live through this object at each use, never cached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memhoncho import settings as settings_module
from memhoncho.errors import MissingApiKey
from memhoncho.settings import Settings
from memhoncho.store.layout import Layout

if TYPE_CHECKING:
    from memhoncho.honcho.adapter import HonchoTarget
    from memhoncho.store.base import Store


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
