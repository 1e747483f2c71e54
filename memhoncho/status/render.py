"""The status view as a readable table (``memhoncho status``) and as Prometheus text (``/metrics``).

A figure that is not known is left out of the metrics (never a silent zero);
``memhoncho_bucket_degraded{bucket=...}`` says which buckets could not be read.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

METRIC_PREFIX = "memhoncho_"


def _when(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "never"
    return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fig(value: Any) -> str:
    return "unknown" if value is None else str(value)


def table(view: dict[str, Any]) -> str:
    """Rows of ``section  field  value``, degraded buckets with their reasons."""
    rows: list[tuple[str, str, str]] = [("status", "state", view.get("state", "?"))]
    config = view.get("config", {})
    for name in ("configured", "honcho_host", "workspace", "broker", "partitions"):
        rows.append(("config", name, _fig(config.get(name))))
    last = view.get("last_delivery", {})
    rows.append(("delivery", "last_delivery_at", _when(last.get("at"))))
    rows.append(("delivery", "source", _fig(last.get("source"))))
    rows.append(("delivery", "marker", _fig(last.get("marker", {}).get("state"))))
    outbox = view.get("outbox", {})
    for name in (
        "conversations",
        "conversations_pending",
        "pending_batches",
        "pending_messages",
        "oldest_pending_age_s",
    ):
        rows.append(("outbox", name, _fig(outbox.get(name))))
    ledgers = view.get("ledgers", {})
    rows.append(("ledgers", "count", _fig(ledgers.get("count"))))
    rows.append(("ledgers", "honcho_sessions", _fig(ledgers.get("honcho_sessions"))))
    rows.append(("dead_letters", "records", _fig(view.get("dead_letters", {}).get("records"))))
    rows.append(("quarantine", "lines", _fig(view.get("quarantine", {}).get("lines"))))
    rows.append(("forks", "pending", _fig(view.get("forks", {}).get("pending"))))
    rows.append(("departures", "count", _fig(view.get("departures", {}).get("count"))))
    rows.append(("redactions", "count", _fig(view.get("redactions", {}).get("count"))))
    depths = view.get("queues", {}).get("depths")
    if isinstance(depths, dict):
        for queue, depth in depths.items():
            rows.append(("queues", queue, str(depth)))
    else:
        rows.append(("queues", "depths", "unknown"))
    tasks = view.get("tasks", {})
    rows.append(("tasks", "live_beats", _fig(tasks.get("live_beats"))))
    for name, task in (tasks.get("tasks") or {}).items():
        error = task.get("last_error_code") or task.get("last_error_type") or "-"
        rows.append(
            (
                "tasks",
                name,
                f"ok {_when(task.get('last_success_at'))}; "
                f"failures in a row {task.get('consecutive_failures', 0)}; last error {error}",
            )
        )
    for section, bucket in view.items():
        if isinstance(bucket, dict) and bucket.get("state") == "degraded":
            for reason in bucket.get("reasons", []):
                rows.append((section, "DEGRADED", str(reason)))
    width0 = max(len(r[0]) for r in rows)
    width1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{width0}}  {b:<{width1}}  {c}" for a, b, c in rows)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Metrics:
    """Samples grouped by family (the format forbids interleaving families)."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}

    def add(
        self, name: str, value: Any, help_text: str, kind: str = "gauge", **labels: str
    ) -> None:
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
            return  # unknown: left out, never a zero
        full = METRIC_PREFIX + name
        family = self.families.setdefault(
            full, [f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"]
        )
        label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        family.append(f"{full}{{{label_text}}} {value}" if label_text else f"{full} {value}")

    def text(self) -> str:
        return "".join(line + "\n" for lines in self.families.values() for line in lines)


def prometheus(view: dict[str, Any]) -> str:
    """Prometheus text exposition format 0.0.4 of the view."""
    m = _Metrics()
    m.add("up", 1, "1 while the status server answers")
    for section, bucket in sorted(view.items()):
        if isinstance(bucket, dict) and "state" in bucket:
            m.add(
                "bucket_degraded",
                int(bucket["state"] == "degraded"),
                "1 when this bucket of the status view could not be read",
                bucket=section,
            )
    m.add("api_key_configured", view.get("config", {}).get("configured"), "1 when a key is set")
    m.add(
        "last_delivery_timestamp_seconds",
        view.get("last_delivery", {}).get("at"),
        "Unix time of the newest delivery to Honcho",
    )
    outbox = view.get("outbox", {})
    m.add("conversations", outbox.get("conversations"), "conversations in the store")
    m.add(
        "conversations_pending",
        outbox.get("conversations_pending"),
        "conversations with undelivered records",
    )
    m.add("pending_batches", outbox.get("pending_batches"), "undelivered outbox records")
    m.add("pending_messages", outbox.get("pending_messages"), "undelivered messages")
    age = outbox.get("oldest_pending_age_s")
    if outbox.get("state") == "ok" and age is None and outbox.get("pending_batches") == 0:
        age = 0
    m.add("oldest_pending_age_seconds", age, "age of the oldest undelivered record")
    ledgers = view.get("ledgers", {})
    m.add("ledgers", ledgers.get("count"), "conversation ledgers")
    m.add("honcho_sessions", ledgers.get("honcho_sessions"), "conversations with a Honcho session")
    m.add("dead_letters", view.get("dead_letters", {}).get("records"), "dead-lettered records")
    m.add("quarantined_lines", view.get("quarantine", {}).get("lines"), "quarantined lines")
    m.add("pending_forks", view.get("forks", {}).get("pending"), "fork records not yet resolved")
    m.add("departures", view.get("departures", {}).get("count"), "departure notices")
    m.add("redactions", view.get("redactions", {}).get("count"), "secrets redacted at capture")
    depths = view.get("queues", {}).get("depths")
    if isinstance(depths, dict):
        for queue, depth in sorted(depths.items()):
            m.add("queue_depth", depth, "messages waiting in a broker queue", queue=queue)
    tasks = view.get("tasks", {})
    m.add("live_beats", tasks.get("live_beats"), "beat processes with a fresh heartbeat")
    for name, task in sorted((tasks.get("tasks") or {}).items()):
        m.add(
            "task_consecutive_failures",
            task.get("consecutive_failures"),
            "failures and retries since the task last succeeded",
            task=name,
        )
        for outcome in ("started", "succeeded", "failed", "retried"):
            m.add(
                "task_runs_total",
                task.get(outcome),
                "task runs by outcome",
                "counter",
                task=name,
                outcome=outcome,
            )
        m.add(
            "task_last_success_timestamp_seconds",
            task.get("last_success_at"),
            "Unix time of the task's last success",
            task=name,
        )
    return m.text()
