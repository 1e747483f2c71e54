"""The one small protocol every results store keeps, and the choice between them."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from memhoncho.results.record import ErrorSummary, TaskResult
from memhoncho.settings.values import is_redis


class ResultsStore(Protocol):
    """Where task results and beat and worker heartbeats live."""

    def record_start(self, name: str, at: float) -> None: ...
    def record_success(self, name: str, at: float) -> None: ...
    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None: ...
    def record_retry(self, name: str) -> None: ...
    def all(self) -> dict[str, TaskResult]: ...
    def beat_heartbeat(self, beat_id: str, at: float) -> None: ...
    def beat_gone(self, beat_id: str) -> None: ...
    def live_beats(self, now: float) -> dict[str, float]: ...
    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None: ...
    def worker_gone(self, worker_id: str) -> None: ...
    def live_workers(self, now: float) -> dict[str, list[str]]: ...


def store_for(broker_url: str | None, data_dir: Path, store_url: str | None = None) -> ResultsStore:
    """The PostgreSQL store's database when ``store_url`` names one (every machine sees it),
    else Redis when the broker is Redis, else the file under the data directory."""
    from memhoncho.store import is_postgres

    if store_url and is_postgres(store_url):
        from memhoncho.results.postgres_store import PostgresResults

        return PostgresResults(store_url, data_dir)
    if broker_url and is_redis(broker_url):
        from memhoncho.results.redis_store import RedisResults

        return RedisResults.from_url(broker_url)
    from memhoncho.results.file_store import FileResults

    return FileResults(data_dir)
