"""The results in the PostgreSQL store's database (``store_url``), shared by every machine.

Counters are bumped in place by one statement each (``jsonb`` arithmetic under the row lock),
so two workers recording at once never lose a count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memhoncho.results.record import BEAT_STALE_S, ErrorSummary, TaskResult, live_worker
from memhoncho.store import open_store
from memhoncho.store.postgres import PostgresStore

#: set ``fields`` from the JSON object %(set)s, then add the JSON object %(add)s of counters
UPSERT_SQL = """
INSERT INTO memhoncho_task_results AS t (name, fields)
VALUES (%(name)s, %(set)s::jsonb || %(add)s::jsonb)
ON CONFLICT (name) DO UPDATE SET fields = t.fields || %(set)s::jsonb || (
    SELECT coalesce(jsonb_object_agg(k, coalesce((t.fields ->> k)::bigint, 0) + v::bigint), '{}')
    FROM jsonb_each_text(%(add)s::jsonb) AS a(k, v)
)
"""


class PostgresResults:
    def __init__(self, url: str, data_dir: Path) -> None:
        store = open_store(data_dir, url)
        assert isinstance(store, PostgresStore)
        self.store = store

    def _upsert(self, name: str, set_: dict[str, Any], add: dict[str, int]) -> None:
        with self.store.connection() as conn:
            conn.execute(
                UPSERT_SQL, {"name": name, "set": json.dumps(set_), "add": json.dumps(add)}
            )

    def record_start(self, name: str, at: float) -> None:
        self._upsert(name, {"last_start_at": at}, {"started": 1})

    def record_success(self, name: str, at: float) -> None:
        self._upsert(name, {"last_success_at": at, "consecutive_failures": 0}, {"succeeded": 1})

    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None:
        counter = "retried" if retry else "failed"
        self._upsert(name, error.fields_at(at), {"consecutive_failures": 1, counter: 1})

    def record_retry(self, name: str) -> None:
        self._upsert(name, {}, {"retried": 1})

    def all(self) -> dict[str, TaskResult]:
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT name, fields FROM memhoncho_task_results ORDER BY name"
            ).fetchall()
        return {name: TaskResult.from_fields(name, fields) for name, fields in rows}

    def _beat(self, kind: str, id_: str, at: float, queues: list[str] | None) -> None:
        with self.store.connection() as conn, conn.transaction():
            conn.execute(
                "DELETE FROM memhoncho_heartbeats WHERE kind = %s AND at < %s",
                (kind, at - BEAT_STALE_S),
            )
            conn.execute(
                "INSERT INTO memhoncho_heartbeats (kind, id, at, queues)"
                " VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (kind, id)"
                " DO UPDATE SET at = excluded.at, queues = excluded.queues",
                (kind, id_, at, json.dumps(queues)),
            )

    def _gone(self, kind: str, id_: str) -> None:
        with self.store.connection() as conn:
            conn.execute(
                "DELETE FROM memhoncho_heartbeats WHERE kind = %s AND id = %s", (kind, id_)
            )

    def _live(self, kind: str, now: float) -> list[tuple[str, float, Any]]:
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT id, at, queues FROM memhoncho_heartbeats WHERE kind = %s AND at >= %s",
                (kind, now - BEAT_STALE_S),
            ).fetchall()
        return [(id_, float(at), queues) for id_, at, queues in rows]

    def beat_heartbeat(self, beat_id: str, at: float) -> None:
        self._beat("beat", beat_id, at, None)

    def beat_gone(self, beat_id: str) -> None:
        self._gone("beat", beat_id)

    def live_beats(self, now: float) -> dict[str, float]:
        return {id_: at for id_, at, _ in self._live("beat", now)}

    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None:
        self._beat("worker", worker_id, at, queues)

    def worker_gone(self, worker_id: str) -> None:
        self._gone("worker", worker_id)

    def live_workers(self, now: float) -> dict[str, list[str]]:
        found = {}
        for id_, at, queues in self._live("worker", now):
            worker = live_worker({"at": at, "queues": queues}, now)
            if worker is not None:
                found[id_] = worker
        return found
