"""The durable state behind one interface (``store.base.Store``): files or PostgreSQL.

``open_store`` picks the implementation from the ``store_url`` setting: unset means the data
directory's files (``store.files``), ``postgresql://...`` that database (``store.postgres``,
whose driver is imported only then). One store per process and place, built on first use.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from memhoncho.errors import ConfigError

if TYPE_CHECKING:
    from memhoncho.store.base import Store

POSTGRES_SCHEMES = ("postgresql://", "postgres://")

_stores: dict[tuple[str, str], Store] = {}
_lock = threading.Lock()


def is_postgres(url: str | None) -> bool:
    return bool(url) and str(url).startswith(POSTGRES_SCHEMES)


def open_store(data_dir: Path, store_url: str | None, timeout_s: float = 2.0) -> Store:
    """The store for ``store_url`` (None: the files under ``data_dir``); ConfigError if bad."""
    from memhoncho.store.layout import Layout

    if store_url is not None and store_url.strip() and not is_postgres(store_url):
        raise ConfigError("store_url must be unset (files) or a postgresql:// URL")
    place = (str(data_dir), "") if not store_url else ("", store_url)
    with _lock:
        found = _stores.get(place)
        if found is None:
            if store_url:
                from memhoncho.store.postgres import PostgresStore

                found = PostgresStore(store_url, connect_timeout_s=timeout_s)
            else:
                from memhoncho.store.files import FileStore

                found = FileStore(Layout(data_dir))
            _stores[place] = found
        return found


def close_stores() -> None:
    """Release every store's connections (tests, and a process that is ending)."""
    with _lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close()
