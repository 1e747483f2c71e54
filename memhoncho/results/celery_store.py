"""Celery's result backend in the PostgreSQL store, for a broker that keeps no results.

Redis keeps Celery's results beside the hints; RabbitMQ keeps none that a host on another
machine can poll (``rpc://`` answers only the publishing connection, and not across a broker
restart). A recall run by a worker is answered through this table instead
(``memhoncho_celery_results``, migration 0005): one row per task, written once by the worker,
read (polled) and then deleted by the waiting host. Rows left behind (a host gone before it
read its answer) expire after ``result_expires`` and are swept by the next write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from celery.backends.base import KeyValueStoreBackend

from memhoncho.store import open_store
from memhoncho.store.postgres import PostgresStore

STORE_TIMEOUT_SETTING = "memhoncho_store_timeout_s"
DEFAULT_EXPIRES_S = 3600.0


def _store_url(app: Any) -> str | None:
    """The store's URL, from the deployment's settings: never in the app's conf, which
    ``celery inspect conf`` and Flower show (its password with it)."""
    from memhoncho.deployment import Deployment

    conf = app.conf
    deployment = Deployment.from_dirs(
        conf.get("memhoncho_config_dir"), conf.get("memhoncho_data_dir")
    )
    return deployment.settings().store_url


class StoreResultBackend(KeyValueStoreBackend):
    """A key-value result backend over the store's pooled connections."""

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app=app, url=url, **kwargs)
        store_url = _store_url(app)
        if not store_url:
            from celery.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured("the store result backend needs a postgresql store_url")
        self._store_url = str(store_url)
        self._data_dir = Path(str(app.conf.get("memhoncho_data_dir") or "."))
        self._timeout_s = float(app.conf.get(STORE_TIMEOUT_SETTING) or 2.0)
        expires = self.expires if isinstance(self.expires, int | float) else None
        self._expires_s = float(expires) if expires else DEFAULT_EXPIRES_S

    def _store(self) -> PostgresStore:
        store = open_store(self._data_dir, self._store_url, self._timeout_s)
        assert isinstance(store, PostgresStore)
        return store

    @staticmethod
    def _text(key: Any) -> str:
        return key.decode("utf-8") if isinstance(key, bytes) else str(key)

    def get(self, key: Any) -> bytes | None:
        with self._store().connection() as conn:
            row = conn.execute(
                "SELECT value FROM memhoncho_celery_results WHERE key = %s AND expires_at > %s",
                (self._text(key), time.time()),
            ).fetchone()
        return bytes(row[0]) if row else None

    def mget(self, keys: list[Any]) -> list[bytes | None]:
        wanted = [self._text(k) for k in keys]
        with self._store().connection() as conn:
            rows = conn.execute(
                "SELECT key, value FROM memhoncho_celery_results"
                " WHERE key = ANY(%s) AND expires_at > %s",
                (wanted, time.time()),
            ).fetchall()
        found = {key: bytes(value) for key, value in rows}
        return [found.get(k) for k in wanted]

    def set(self, key: Any, value: Any) -> None:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        now = time.time()
        with self._store().connection() as conn:
            conn.execute(
                "WITH gone AS (DELETE FROM memhoncho_celery_results WHERE expires_at <= %s)"
                " INSERT INTO memhoncho_celery_results (key, value, expires_at)"
                " VALUES (%s, %s, %s) ON CONFLICT (key) DO UPDATE"
                " SET value = excluded.value, expires_at = excluded.expires_at",
                (now, self._text(key), data, now + self._expires_s),
            )

    def claim(self, key: Any, ttl_s: float) -> bool:
        """Insert ``key`` unless a live row holds it (``results.once``): True if inserted."""
        now = time.time()
        with self._store().connection() as conn:
            row = conn.execute(
                "INSERT INTO memhoncho_celery_results AS r (key, value, expires_at)"
                " VALUES (%s, '\\x31', %s) ON CONFLICT (key) DO UPDATE"
                " SET value = excluded.value, expires_at = excluded.expires_at"
                " WHERE r.expires_at <= %s RETURNING key",
                (self._text(key), now + ttl_s, now),
            ).fetchone()
        return row is not None

    def delete(self, key: Any) -> None:
        with self._store().connection() as conn:
            conn.execute("DELETE FROM memhoncho_celery_results WHERE key = %s", (self._text(key),))
