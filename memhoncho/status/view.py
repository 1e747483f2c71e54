"""The status view: task results joined with the store's census and the broker's queue depths.

``status_view(deployment)`` never raises and never shows a silent zero: a bucket whose files or
server cannot be read says ``"state": "degraded"`` with its reasons, and a figure that is not
known is ``None``. ``sources``: could every source be read; ``health``: the verdict on
delivery itself (``status.health``). Cheap: the store census is cached by file stat.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

from memhoncho import results
from memhoncho.deployment import Deployment
from memhoncho.imports import progress as imports
from memhoncho.settings import Settings, values
from memhoncho.status import foreign_hints, health, hints, redactions, render, stranded
from memhoncho.status.workers import MAX_AGE_S, WorkersReader, others
from memhoncho.store import parked
from memhoncho.store.base import Census
from memhoncho.worker import queue_depths, routing

OK = "ok"
DEGRADED = "degraded"


def _bucket(errors: list[str], **figures: Any) -> dict[str, Any]:
    bucket: dict[str, Any] = {"state": DEGRADED if errors else OK, **figures}
    if errors:
        bucket["reasons"] = errors
    return bucket


def _guarded(name: str, build: Any) -> dict[str, Any]:
    """A bucket that fails to build says why instead of failing the whole view."""
    try:
        value: dict[str, Any] = build()
        return value
    except Exception as exc:
        return {"state": DEGRADED, "reasons": [f"{name}: {type(exc).__name__}"]}


def honcho_host(base_url: str) -> str:
    """scheme://host[:port] of the Honcho URL: no credentials, path or query."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable URL)"
    return f"{parts.scheme}://{host}{port}" if parts.scheme else "(unparsable URL)"


def broker_kind(current: Settings) -> str:
    return values.broker_kind(current.broker_url)


def config_summary(deployment: Deployment, current: Settings) -> dict[str, Any]:
    """What is configured; a settings or secrets file that cannot be read degrades it."""
    from memhoncho import settings as settings_module

    return _bucket(
        settings_module.problems(deployment.config_dir),
        configured=deployment.api_key() is not None,
        honcho_host=honcho_host(current.base_url),
        workspace=current.workspace_id,
        broker=broker_kind(current),
        partitions=current.partitions,
        store=store_kind(current),
        **relay_fields(deployment),
    )


def relay_fields(deployment: Deployment) -> dict[str, Any]:
    """``relay``: running, absent, or missing (absent while ``memhoncho capture``'s records
    wait for one: ``store.relay_watch``, as doctor reads it); ``relay_waiting``: how many."""
    from memhoncho.store import relay_watch

    found = relay_watch.watch(deployment.layout)
    return {"relay": found.state, "relay_waiting": found.waiting}


def store_kind(current: Settings) -> str:
    """files or postgresql: the URL itself (it may hold a password) is never shown."""
    from memhoncho.store import is_postgres

    return "postgresql" if is_postgres(current.store_url) else "files"


# ---- last delivery -----------------------------------------------------------------------


def last_delivery(deployment: Deployment, census: Census) -> dict[str, Any]:
    """The marker and the ledgers' newest delivery: the newer wins; neither is ever guessed."""
    marker_at, marker_error = deployment.store().last_delivery()
    ledgers_at = census.newest_delivery_at
    candidates = [(t, s) for t, s in ((marker_at, "marker"), (ledgers_at, "ledgers")) if t]
    at, source = max(candidates) if candidates else (None, None)
    marker = {"state": "unreadable" if marker_error else ("ok" if marker_at else "absent")}
    if marker_error:
        marker["reason"] = marker_error
    errors = [f"marker: {marker_error}"] if marker_error else []
    return _bucket(
        errors,
        at=at,
        source=source,
        marker_at=marker_at,
        ledgers_at=ledgers_at,
        marker=marker,
    )


# ---- store buckets -----------------------------------------------------------------------


def outbox_bucket(census: Census, now: float) -> dict[str, Any]:
    errors = list(census.outbox_errors)
    if census.upper_bound_conversations:
        errors.append(
            f"{census.upper_bound_conversations} conversation(s) have a corrupt ledger: "
            "their pending figures are upper bounds"
        )
    return _bucket(
        errors,
        conversations=census.conversations,
        conversations_pending=census.conversations_pending,
        pending_batches=census.pending_batches,
        pending_messages=census.pending_messages,
        oldest_pending_age_s=oldest_pending_age(census, now),
        corrupt_lines_awaiting_quarantine=census.corrupt_outbox_lines,
    )


def oldest_pending_age(census: Census, now: float) -> float | None:
    """Seconds the oldest undelivered record has waited: 0 when nothing is pending (a known
    figure), None only when it is not known (an outbox could not be read, so something may be
    pending unseen)."""
    oldest = census.oldest_pending_at
    if oldest is not None:
        return round(max(0.0, now - oldest), 3)
    if census.pending_batches == 0 and not census.outbox_errors:
        return 0.0
    return None


def forks_bucket(deployment: Deployment) -> dict[str, Any]:
    """Pending fork records and how resolved ones began (the forks module's own summary)."""
    from memhoncho.store.forks import fork_summary

    return {"state": OK, **fork_summary(deployment.store())}


def departures_bucket(deployment: Deployment) -> dict[str, Any]:
    found, errors = deployment.store().departures()
    notices = [
        {
            "peer_id": value.get("peer_id"),
            "at": value.get("at"),
            "purged": bool(value.get("purged")),
        }
        for value in found
    ]
    return _bucket(errors, count=len(found) + len(errors), notices=notices)


def hooks_bucket(deployment: Deployment) -> dict[str, Any]:
    """Claude Code's hooks: the sessions they read, and their last errors (codes and
    memhoncho's words; never content), newest last."""
    from memhoncho.integrations.claude_code import cursor

    sessions = cursor.folder(deployment.data_dir) / "sessions"
    errors = cursor.last_errors(deployment.data_dir)
    return _bucket(
        [],
        claude_code_sessions=len(list(sessions.glob("*.json"))) if sessions.is_dir() else 0,
        last_errors=errors[-5:],
        last_error_at=errors[-1]["at"] if errors else None,
    )


# ---- broker ------------------------------------------------------------------------------


def queues_bucket(deployment: Deployment, current: Settings) -> dict[str, Any]:
    """Each queue's waiting messages, asked of the broker (``worker/queue_depths.py``)."""
    kind = broker_kind(current)
    if kind == "embedded" and not (deployment.layout.broker_dir / "queue").is_dir():
        return _bucket(["the embedded broker's queue folder does not exist yet"], depths=None)
    try:
        depths = queue_depths.read(deployment, current, routing.all_queues(current.partitions))
    except queue_depths.DepthsUnknown as exc:
        return _bucket([str(exc)], depths=None)
    except Exception as exc:
        return _bucket([f"broker unreachable ({type(exc).__name__})"], depths=None)
    return _bucket([], broker=kind, depths=depths, total=sum(depths.values()))


# ---- tasks -------------------------------------------------------------------------------


def tasks_bucket(
    deployment: Deployment, current: Settings, now: float, others: Collection[str] = ()
) -> dict[str, Any]:
    """Task results and live beats and workers; a worker in ``others`` (node names of workers
    serving another deployment, ``status.workers``) is no consumer of this deployment's."""
    try:
        store = results.store_for(current.broker_url, deployment.data_dir, current.store_url)
        found = store.all()
        beats = store.live_beats(now)
        workers = {
            worker_id: queues
            for worker_id, queues in store.live_workers(now).items()
            if worker_id.rsplit(":", 1)[0] not in others  # a heartbeat's id is node:pid
        }
    except Exception as exc:
        return _bucket([f"task results unreadable ({type(exc).__name__})"], tasks=None)
    consumers = dict.fromkeys(routing.all_queues(current.partitions), 0)
    for queues in workers.values():
        for queue in queues:
            if queue in consumers:
                consumers[queue] += 1
    return _bucket(
        [],
        tasks={name: result.as_dict() for name, result in found.items()},
        live_beats=len(beats),
        live_workers=len(workers),
        consumers=consumers,
    )


# ---- the view ----------------------------------------------------------------------------


class StatusReader:
    """Builds the view; keep one for repeated reads (the HTTP server) to reuse its cache."""

    def __init__(self, deployment: Deployment, workers_max_age_s: float = MAX_AGE_S) -> None:
        self.deployment = deployment
        self.workers = WorkersReader(max_age_s=workers_max_age_s)

    def read(self) -> dict[str, Any]:
        now = time.time()
        deployment = self.deployment
        try:
            current = deployment.settings()
        except Exception as exc:  # ConfigError names the file, key and reason
            reason = getattr(exc, "message", None) or f"settings unreadable ({type(exc).__name__})"
            return {
                "health": {"verdict": health.DEGRADED, "reasons": [reason]},
                "sources": DEGRADED,
                "degraded": ["config"],
                "reasons": [reason],
            }
        # The workers first: asking them waits out a broadcast, which must not fall between
        # the store's census and the task results (a delivery finishing meanwhile would show
        # as a success with its records still pending).
        workers = _guarded("workers", lambda: self.workers.read(deployment))
        now = time.time()
        census_error = ""
        try:
            # The store keeps its census cache (the file store's by file stat), so repeated
            # reads in one process stay cheap.
            census: Census | None = deployment.store().census()
        except Exception as exc:
            census = None
            census_error = type(exc).__name__
        view: dict[str, Any] = {"generated_at": now}
        view["config"] = _guarded("config", lambda: config_summary(deployment, current))
        if census is not None:
            c = census
            view["last_delivery"] = _guarded("last_delivery", lambda: last_delivery(deployment, c))
            view["outbox"] = outbox_bucket(c, now)
            view["ledgers"] = _bucket(c.ledger_errors, count=c.ledgers, honcho_sessions=c.sessions)
            view["dead_letters"] = _bucket(
                c.dead_errors, files=c.dead_files, records=c.dead_records
            )
            view["quarantine"] = _bucket(
                c.quarantine_errors, files=c.quarantine_files, lines=c.quarantined_lines
            )
        else:
            for name in ("last_delivery", "outbox", "ledgers", "dead_letters", "quarantine"):
                view[name] = _bucket([f"store census failed ({census_error})"])
        view["forks"] = _guarded("forks", lambda: forks_bucket(deployment))
        view["departures"] = _guarded("departures", lambda: departures_bucket(deployment))
        view["redactions"] = _guarded("redactions", lambda: redactions.bucket(deployment))
        view["hooks"] = _guarded("hooks", lambda: hooks_bucket(deployment))
        view["import"] = _guarded("import", lambda: imports.bucket(deployment.layout))
        view["queues"] = _guarded("queues", lambda: queues_bucket(deployment, current))
        view["workers"] = workers
        strangers = others(workers)
        view["tasks"] = _guarded("tasks", lambda: tasks_bucket(deployment, current, now, strangers))
        stale_s = health.STALL_SWEEPS * current.sweep_interval_s  # a park not renewed since
        view["parked"] = _guarded(
            "parked", lambda: _bucket([], **parked.summary(deployment.layout, now, stale_s))
        )
        # The broker is asked once: the stranded look takes the queues bucket's answer, and
        # none (a broker down, no queue folder yet) as every queue idle, which is what the
        # look's own question would have concluded after waiting out the same timeout.
        depths = view["queues"].get("depths") or {}
        view["stranded"] = _guarded(
            "stranded", lambda: stranded.bucket(deployment, current, now, depths)
        )
        view["foreign_hints"] = _guarded("foreign_hints", lambda: foreign_hints.bucket(deployment))
        view["hints"] = _guarded("hints", lambda: hints.bucket(deployment))
        view["refused_tasks"] = _guarded("refused_tasks", lambda: hints.refused_bucket(deployment))
        view["last_delivery_at"] = view["last_delivery"].get("at")
        degraded = sorted(
            name for name, b in view.items() if isinstance(b, dict) and b.get("state") == DEGRADED
        )
        view["sources"] = DEGRADED if degraded else OK  # could every source be read
        view["degraded"] = degraded
        view["health"] = health.verdict(view, current)
        return {"health": view.pop("health"), **view}  # the verdict first, as the table shows it


def status_view(deployment: Deployment) -> dict[str, Any]:
    """The status view, once (the CLI); never raises."""
    return StatusReader(deployment).read()


def render_table(view: dict[str, Any]) -> str:
    """The view as the readable table ``memhoncho status`` prints."""
    return render.table(view)
