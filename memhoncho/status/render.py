"""The status view as a readable table (``memhoncho status``) and as Prometheus text (``/metrics``).

A figure that is not known is left out of the metrics (never a silent zero);
``memhoncho_bucket_degraded{bucket=...}`` says which buckets could not be read.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from memhoncho.status import foreign_hints, hints, stranded
from memhoncho.status.health import VERDICTS as HEALTH_VERDICTS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

METRIC_PREFIX = "memhoncho_"


def _when(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "never"
    return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fig(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _age(outbox: dict[str, Any]) -> str:
    age = outbox.get("oldest_pending_age_s")
    if age is None:
        return "unknown"
    return (
        f"{age} (nothing pending)" if age == 0 and outbox.get("pending_batches") == 0 else str(age)
    )


HEALTH_STYLES = {"healthy": "green", "degraded": "yellow", "stalled": "red", "failing": "bold red"}
TABLE_WIDTH = 120  # columns of the table when it is not drawn on a terminal


def rows(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(section, field, value)``: the health verdict and its reasons first, then every figure,
    then the reasons of the buckets that could not be read."""
    health = view.get("health") or {}
    rows: list[tuple[str, str, str]] = [("health", "verdict", health.get("verdict", "unknown"))]
    for reason in health.get("reasons") or []:
        rows.append(("health", "reason", str(reason)))
    rows.append(("status", "sources", view.get("sources", "?")))
    rows.append(("status", "read_at", _when(view.get("generated_at"))))
    config = view.get("config", {})
    for name in ("configured", "honcho_host", "workspace", "broker", "partitions", "relay"):
        rows.append(("config", name, _fig(config.get(name))))
    if config.get("relay_waiting"):
        rows.append(("config", "relay_waiting", _fig(config.get("relay_waiting"))))
    last = view.get("last_delivery", {})
    rows.append(("delivery", "last_delivery_at", _when(last.get("at"))))
    rows.append(("delivery", "source", _fig(last.get("source"))))
    rows.append(("delivery", "marker", _fig(last.get("marker", {}).get("state"))))
    outbox = view.get("outbox", {})
    for name in ("conversations", "conversations_pending", "pending_batches", "pending_messages"):
        rows.append(("outbox", name, _fig(outbox.get(name))))
    rows.append(("outbox", "oldest_pending_age_s", _age(outbox)))
    ledgers = view.get("ledgers", {})
    rows.append(("ledgers", "count", _fig(ledgers.get("count"))))
    rows.append(("ledgers", "honcho_sessions", _fig(ledgers.get("honcho_sessions"))))
    rows.append(("dead_letters", "records", _fig(view.get("dead_letters", {}).get("records"))))
    rows.append(("quarantine", "lines", _fig(view.get("quarantine", {}).get("lines"))))
    rows.append(("forks", "pending", _fig(view.get("forks", {}).get("pending"))))
    rows.append(("departures", "count", _fig(view.get("departures", {}).get("count"))))
    rows.append(("redactions", "count", _fig(view.get("redactions", {}).get("count"))))
    hooks = view.get("hooks", {})
    if hooks.get("claude_code_sessions") or hooks.get("last_errors"):
        rows.append(("hooks", "claude_code_sessions", _fig(hooks.get("claude_code_sessions"))))
        for error in hooks.get("last_errors", [])[-3:]:
            rows.append(("hooks", "error", f"{_when(error.get('at'))} {error.get('code')}"))
    rows += stranded.table_rows(view)
    rows += foreign_hints.table_rows(view)
    rows += hints.table_rows(view)
    depths = view.get("queues", {}).get("depths")
    if isinstance(depths, dict):
        for queue, depth in depths.items():
            rows.append(("queues", queue, str(depth)))
    else:
        rows.append(("queues", "depths", "unknown"))
    rows += _worker_rows(view.get("workers") or {})
    tasks = view.get("tasks", {})
    rows.append(("tasks", "live_beats", _fig(tasks.get("live_beats"))))
    rows.append(("tasks", "live_workers", _fig(tasks.get("live_workers"))))
    consumers = tasks.get("consumers")
    if isinstance(consumers, dict):
        unconsumed = [q for q, n in consumers.items() if not n]
        if unconsumed and len(unconsumed) == len(consumers):
            shown = "all (no live worker)"
        else:
            shown = ", ".join(unconsumed) or "none"
        rows.append(("tasks", "unconsumed_queues", shown))
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
    return rows


def _worker_rows(workers: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each worker that answered, and whether it serves this deployment."""
    seen = workers.get("seen")
    if not isinstance(seen, list):
        return [("workers", "answered", "unknown")]
    rows = [("workers", "answered", str(len(seen)))]
    for worker in seen:
        serves = worker.get("this_deployment")
        if serves is None:
            shown = "unknown (it publishes no fingerprint)"
        elif serves:
            shown = "this deployment"
        else:
            shown = f"ANOTHER deployment: {worker.get('serves')}"
        rows.append(("workers", str(worker.get("name")), shown))
    return rows


def _rich_table(view: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    verdict = (view.get("health") or {}).get("verdict", "unknown")
    drawn = Table(
        title=f"memhoncho status: {verdict}",
        title_style=HEALTH_STYLES.get(verdict, ""),
        show_header=True,
        header_style="bold",
    )
    for name in ("section", "field", "value"):
        drawn.add_column(name, overflow="fold")
    for section, name, value in rows(view):
        style = ""
        if section == "health":
            style = HEALTH_STYLES.get(verdict, "")
        elif name == "DEGRADED":
            style = "yellow"
        drawn.add_row(section, name, Text(value, style=style))
    return drawn


#: how a table is drawn: (width, None for ``TABLE_WIDTH``; on a terminal; in colour)
Style = tuple[int | None, bool, bool]


def table(view: dict[str, Any], width: int = TABLE_WIDTH) -> str:
    """The table as plain text (no colour codes), e.g. for a log or a test."""
    return drawn_table(view, (width, False, False)).rstrip("\n")


def style_for(terminal: dict[str, Any]) -> Style:
    """The style of a stdout described by ``relay_socket.terminal()`` (sent by the command)."""
    width = int(terminal.get("width") or 0) or None
    return width, bool(terminal.get("terminal")), bool(terminal.get("color"))


def drawn_table(view: dict[str, Any], style: Style) -> str:
    """The table as ``memhoncho status`` prints it on a stdout of ``style``. The command says
    what its stdout is (``relay_socket.terminal``), so the relay draws for it as the command
    would."""
    import io

    from rich.console import Console

    width, terminal, color = style
    out = io.StringIO()
    Console(
        file=out,
        width=width or TABLE_WIDTH,
        force_terminal=terminal,
        color_system="standard" if color else None,
    ).print(_rich_table(view))
    return out.getvalue()


def _number(value: Any) -> float | None:
    """A figure as a sample value; None (left out) when it is not known."""
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


class ViewCollector:
    """A prometheus_client collector over one status view (``memhoncho_*`` families)."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        view = self.view

        def gauge(name: str, help_text: str, value: Any = None, **labels: str) -> Metric | None:
            family = GaugeMetricFamily(METRIC_PREFIX + name, help_text, labels=sorted(labels))
            number = _number(value)
            if number is None:
                return None  # unknown: left out, never a zero
            family.add_metric([labels[k] for k in sorted(labels)], number)
            return family

        def labelled(
            name: str, help_text: str, samples: list[tuple[dict[str, str], Any]], counter: bool
        ) -> Metric | None:
            names = sorted(samples[0][0]) if samples else []
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(METRIC_PREFIX + name, help_text, labels=names)
            for labels, value in samples:
                number = _number(value)
                if number is not None:
                    family.add_metric([labels[k] for k in names], number)
            return family if family.samples else None

        health = view.get("health") or {}
        found: list[Metric | None] = [
            gauge("up", "1 while the status server answers", 1),
            labelled(
                "health",
                "1 for the current health verdict (healthy, degraded, stalled, failing), else 0",
                [
                    ({"verdict": v}, int(health.get("verdict") == v))
                    for v in HEALTH_VERDICTS
                    if health.get("verdict")
                ],
                counter=False,
            ),
            labelled(
                "bucket_degraded",
                "1 when this bucket of the status view could not be read",
                [
                    ({"bucket": section}, int(bucket["state"] == "degraded"))
                    for section, bucket in sorted(view.items())
                    if isinstance(bucket, dict) and "state" in bucket
                ],
                counter=False,
            ),
            gauge(
                "api_key_configured",
                "1 when a key is set",
                view.get("config", {}).get("configured"),
            ),
            gauge(
                "last_delivery_timestamp_seconds",
                "Unix time of the newest delivery to Honcho",
                view.get("last_delivery", {}).get("at"),
            ),
        ]
        outbox = view.get("outbox", {})
        for name, help_text in (
            ("conversations", "conversations in the store"),
            ("conversations_pending", "conversations with undelivered records"),
            ("pending_batches", "undelivered outbox records"),
            ("pending_messages", "undelivered messages"),
        ):
            found.append(gauge(name, help_text, outbox.get(name)))
        found.append(
            gauge(
                "oldest_pending_age_seconds",
                "age of the oldest undelivered record; 0 when nothing is pending",
                outbox.get("oldest_pending_age_s"),
            )
        )
        ledgers = view.get("ledgers", {})
        tasks = view.get("tasks", {})
        found += [
            gauge("ledgers", "conversation ledgers", ledgers.get("count")),
            gauge(
                "honcho_sessions",
                "conversations with a Honcho session",
                ledgers.get("honcho_sessions"),
            ),
            gauge(
                "dead_letters",
                "dead-lettered records",
                view.get("dead_letters", {}).get("records"),
            ),
            gauge(
                "quarantined_lines", "quarantined lines", view.get("quarantine", {}).get("lines")
            ),
            gauge(
                "pending_forks",
                "fork records not yet resolved",
                view.get("forks", {}).get("pending"),
            ),
            gauge("departures", "departure notices", view.get("departures", {}).get("count")),
            gauge(
                "redactions",
                "secrets redacted at capture",
                view.get("redactions", {}).get("count"),
            ),
            gauge(
                "foreign_hints",
                "delivery hints a worker got from another deployment",
                view.get("foreign_hints", {}).get("count"),
            ),
            gauge(
                "hints_failed",
                "delivery hints that failed for a reason other than the broker being down",
                view.get("hints", {}).get("failed"),
            ),
            gauge(
                "refused_tasks",
                "recall tasks refused for a proof that was not the deployment's",
                view.get("refused_tasks", {}).get("count"),
            ),
            gauge(
                "stranded_conversations",
                "conversations with pending records and nothing queued or running for them",
                view.get("stranded", {}).get("count"),
            ),
            gauge(
                "stranded_oldest_past_bound_seconds",
                "seconds the longest stranded conversation is past its bound",
                view.get("stranded", {}).get("oldest_past_bound_s"),
            ),
            gauge("live_beats", "beat processes with a fresh heartbeat", tasks.get("live_beats")),
            gauge(
                "live_workers",
                "worker processes with a fresh heartbeat",
                tasks.get("live_workers"),
            ),
            gauge(
                "workers_other_deployment",
                "workers on this broker serving another data directory or store",
                view.get("workers", {}).get("other_deployment"),
            ),
        ]
        per_queue = (
            (
                "queue_depth",
                "messages waiting in a broker queue",
                view.get("queues", {}).get("depths"),
            ),
            ("queue_consumers", "live workers consuming a broker queue", tasks.get("consumers")),
        )
        for name, help_text, by_queue in per_queue:
            if isinstance(by_queue, dict):
                samples = [({"queue": q}, n) for q, n in sorted(by_queue.items())]
                found.append(labelled(name, help_text, samples, counter=False))
        per_task = sorted((tasks.get("tasks") or {}).items())
        found += [
            labelled(
                "task_consecutive_failures",
                "failures and retries since the task last succeeded",
                [({"task": n}, t.get("consecutive_failures")) for n, t in per_task],
                counter=False,
            ),
            labelled(
                "task_runs",
                "task runs by outcome",
                [
                    ({"task": n, "outcome": outcome}, t.get(outcome))
                    for n, t in per_task
                    for outcome in ("started", "succeeded", "failed", "retried")
                ],
                counter=True,
            ),
            labelled(
                "task_last_success_timestamp_seconds",
                "Unix time of the task's last success",
                [({"task": n}, t.get("last_success_at")) for n, t in per_task],
                counter=False,
            ),
        ]
        yield from (family for family in found if family is not None)


def prometheus(view: dict[str, Any]) -> str:
    """The view and this process's metrics in the Prometheus text format (prometheus_client)."""
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(view))
    ProcessCollector(registry=registry)
    return generate_latest(registry).decode()
