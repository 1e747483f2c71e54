"""The results in Redis: a hash per task name, a key per live beat (shared by every worker)."""

from __future__ import annotations

import json
from typing import Any

from memhoncho.results.record import BEAT_STALE_S, ErrorSummary, TaskResult, live_worker

REDIS_TIMEOUT_S = 1.0  # seconds; bookkeeping never holds a task up for long


RESULTS_KEY_PREFIX = "memhoncho:results:"  #: a Redis hash per task name
BEAT_KEY_PREFIX = "memhoncho:beat:"  #: a Redis key per live beat, expiring
WORKER_KEY_PREFIX = "memhoncho:worker:"  #: a Redis key per live worker (its queues), expiring


class RedisResults:
    """A hash per task name; counters with HINCRBY, so concurrent workers never lose a count."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> RedisResults:
        import redis

        return cls(
            redis.Redis.from_url(
                url,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
                decode_responses=True,
            )
        )

    def record_start(self, name: str, at: float) -> None:
        pipe = self.client.pipeline()
        pipe.hset(RESULTS_KEY_PREFIX + name, "last_start_at", at)
        pipe.hincrby(RESULTS_KEY_PREFIX + name, "started", 1)
        pipe.execute()

    def record_success(self, name: str, at: float) -> None:
        pipe = self.client.pipeline()
        pipe.hset(
            RESULTS_KEY_PREFIX + name, mapping={"last_success_at": at, "consecutive_failures": 0}
        )
        pipe.hincrby(RESULTS_KEY_PREFIX + name, "succeeded", 1)
        pipe.execute()

    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None:
        pipe = self.client.pipeline()
        pipe.hset(RESULTS_KEY_PREFIX + name, mapping=error.fields_at(at))
        pipe.hincrby(RESULTS_KEY_PREFIX + name, "consecutive_failures", 1)
        pipe.hincrby(RESULTS_KEY_PREFIX + name, "retried" if retry else "failed", 1)
        pipe.execute()

    def record_retry(self, name: str) -> None:
        self.client.hincrby(RESULTS_KEY_PREFIX + name, "retried", 1)

    def all(self) -> dict[str, TaskResult]:
        keys = sorted(self.client.scan_iter(match=RESULTS_KEY_PREFIX + "*", count=200))
        if not keys:
            return {}
        pipe = self.client.pipeline()
        for key in keys:
            pipe.hgetall(key)
        found = {}
        for key, raw in zip(keys, pipe.execute(), strict=True):
            name = key[len(RESULTS_KEY_PREFIX) :]
            found[name] = TaskResult.from_fields(name, raw)
        return found

    def beat_heartbeat(self, beat_id: str, at: float) -> None:
        self.client.set(BEAT_KEY_PREFIX + beat_id, at, ex=int(BEAT_STALE_S))

    def beat_gone(self, beat_id: str) -> None:
        self.client.delete(BEAT_KEY_PREFIX + beat_id)

    def live_beats(self, now: float) -> dict[str, float]:
        beats = {}
        for key in self.client.scan_iter(match=BEAT_KEY_PREFIX + "*", count=200):
            value = self.client.get(key)
            if value is not None and now - float(value) <= BEAT_STALE_S:
                beats[key[len(BEAT_KEY_PREFIX) :]] = float(value)
        return beats

    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None:
        value = json.dumps({"at": at, "queues": queues})
        self.client.set(WORKER_KEY_PREFIX + worker_id, value, ex=int(BEAT_STALE_S))

    def worker_gone(self, worker_id: str) -> None:
        self.client.delete(WORKER_KEY_PREFIX + worker_id)

    def live_workers(self, now: float) -> dict[str, list[str]]:
        workers = {}
        for key in self.client.scan_iter(match=WORKER_KEY_PREFIX + "*", count=200):
            raw = self.client.get(key)
            worker = live_worker(raw and json.loads(raw), now)
            if worker is not None:
                workers[key[len(WORKER_KEY_PREFIX) :]] = worker
        return workers
