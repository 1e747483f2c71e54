"""The results in one JSON file under the data directory (embedded broker, one machine)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memhoncho.results.record import BEAT_STALE_S, ErrorSummary, TaskResult, live_worker
from memhoncho.store.atomic import write_json
from memhoncho.store.locks import file_lock

log = logging.getLogger(__name__)

RESULTS_FILE = Path("state") / "results.json"
RESULTS_LOCK = Path("state") / "locks" / "results.lock"


class FileResults:
    """One JSON file (``state/results.json``), read-modified-written under a file lock."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / RESULTS_FILE
        self.lock = data_dir / RESULTS_LOCK

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {"tasks": {}, "beats": {}}
        except ValueError:
            log.warning(
                "results file is corrupt; starting it afresh", extra={"action": "results_reset"}
            )
            return {"tasks": {}, "beats": {}}
        if not isinstance(value, dict):
            return {"tasks": {}, "beats": {}}
        value.setdefault("tasks", {})
        value.setdefault("beats", {})
        return value

    def _update(self, change: Callable[[dict[str, Any]], object]) -> None:
        with file_lock(self.lock):
            state = self._read()
            change(state)
            write_json(self.path, state)

    def _task(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        task: dict[str, Any] = state["tasks"].setdefault(name, {})
        return task

    def record_start(self, name: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task["last_start_at"] = at
            task["started"] = int(task.get("started", 0)) + 1

        self._update(change)

    def record_success(self, name: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task.update(last_success_at=at, consecutive_failures=0)
            task["succeeded"] = int(task.get("succeeded", 0)) + 1

        self._update(change)

    def record_failure(self, name: str, at: float, error: ErrorSummary, *, retry: bool) -> None:
        counter = "retried" if retry else "failed"

        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task.update(error.fields_at(at))
            task["consecutive_failures"] = int(task.get("consecutive_failures", 0)) + 1
            task[counter] = int(task.get(counter, 0)) + 1

        self._update(change)

    def record_retry(self, name: str) -> None:
        def change(state: dict[str, Any]) -> None:
            task = self._task(state, name)
            task["retried"] = int(task.get("retried", 0)) + 1

        self._update(change)

    def all(self) -> dict[str, TaskResult]:
        """Raises ValueError when the file is not JSON (the status view says so)."""
        try:
            value = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        tasks = value.get("tasks", {}) if isinstance(value, dict) else {}
        return {name: TaskResult.from_fields(name, raw) for name, raw in sorted(tasks.items())}

    def beat_heartbeat(self, beat_id: str, at: float) -> None:
        def change(state: dict[str, Any]) -> None:
            beats = state["beats"]
            for other in [b for b, seen in beats.items() if at - float(seen) > BEAT_STALE_S]:
                del beats[other]
            beats[beat_id] = at

        self._update(change)

    def beat_gone(self, beat_id: str) -> None:
        self._update(lambda state: state["beats"].pop(beat_id, None))

    def live_beats(self, now: float) -> dict[str, float]:
        beats = self._read()["beats"]
        return {b: float(t) for b, t in beats.items() if now - float(t) <= BEAT_STALE_S}

    def worker_heartbeat(self, worker_id: str, at: float, queues: list[str]) -> None:
        def change(state: dict[str, Any]) -> None:
            workers = state.setdefault("workers", {})
            for other in [w for w in workers if live_worker(workers[w], at) is None]:
                del workers[other]
            workers[worker_id] = {"at": at, "queues": queues}

        self._update(change)

    def worker_gone(self, worker_id: str) -> None:
        self._update(lambda state: state.setdefault("workers", {}).pop(worker_id, None))

    def live_workers(self, now: float) -> dict[str, list[str]]:
        found = {}
        for worker_id, value in (self._read().get("workers") or {}).items():
            worker = live_worker(value, now)
            if worker is not None:
                found[worker_id] = worker
        return found
