"""One health verdict over the status view: healthy, degraded, stalled or failing, with reasons.

The view's buckets say what memhoncho holds and whether each source could be read; this says
whether delivery is going well, from the figures an operator would otherwise combine by hand:
consecutive task failures, conversations parked by Honcho failures (since when, and why), the
age of the oldest pending record, live beats and which queues a live worker consumes. The worst
finding wins; every finding is a reason.
"""

from __future__ import annotations

import time
from typing import Any

from memhoncho.settings import Settings
from memhoncho.status import foreign_hints, hints, stranded

HEALTHY = "healthy"  #: delivering, every source read, beat and consumers in place
DEGRADED = "degraded"  #: works for now, but something an operator must fix (or a source unread)
STALLED = "stalled"  #: pending work is not moving (no consumer, or too old), nothing failing
FAILING = "failing"  #: tasks fail again and again (Honcho down or refusing, say)
VERDICTS = (HEALTHY, DEGRADED, STALLED, FAILING)  # in order of severity

FAILING_AFTER = 3  # consecutive failures of one task; one retry is ordinary weather
STALL_SWEEPS = 2  # pending older than this many sweep intervals: the sweep did not move it
#: A task failing with these failed because Honcho was away (not for anything of its own): a
#: delivery Honcho took after its last failure ends the streak's verdict (a refresh that gave up
#: during an outage waits for the next beat, the outage is over).
HONCHO_AWAY_CODES = frozenset(
    {"ERR_HONCHO_UNREACHABLE", "ERR_HONCHO_UNAVAILABLE", "ERR_HONCHO_TIMEOUT"}
)


def _worst(found: list[tuple[str, str]]) -> str:
    return max((v for v, _ in found), key=VERDICTS.index, default=HEALTHY)


def verdict(view: dict[str, Any], current: Settings) -> dict[str, Any]:
    """``{"verdict": ..., "reasons": [...]}`` for a status view built with ``current``."""
    found: list[tuple[str, str]] = []
    found += _failures(view.get("tasks") or {}, view.get("last_delivery_at"))
    found += _parked(view.get("parked") or {}, view.get("outbox") or {}, view.get("generated_at"))
    found += _pending(view.get("outbox") or {}, current)
    found += _consumers(view.get("tasks") or {}, view.get("queues") or {})
    found += _beats(view.get("tasks") or {})
    found += _other_workers(view.get("workers") or {})
    found += _relay(view.get("config") or {}, current)
    found += _stranded(view)
    found += foreign_hints.findings(view)
    found += hints.findings(view)
    if view.get("config", {}).get("configured") is False:
        found.append((DEGRADED, "no Honcho API key is configured: captures wait on disk"))
    unread = view.get("degraded") or []
    if unread:
        found.append((DEGRADED, f"could not read: {', '.join(unread)}"))
    order = {v: i for i, v in enumerate(reversed(VERDICTS))}
    found.sort(key=lambda f: order[f[0]])  # worst first, then in the order found
    return {"verdict": _worst(found), "reasons": [reason for _, reason in found]}


def _failures(tasks: dict[str, Any], delivered_at: Any) -> list[tuple[str, str]]:
    found = []
    for name, task in sorted((tasks.get("tasks") or {}).items()):
        failures = task.get("consecutive_failures") or 0
        if failures >= FAILING_AFTER:
            code = task.get("last_error_code") or task.get("last_error_type") or "unknown error"
            failed_at = task.get("last_error_at")
            if code in HONCHO_AWAY_CODES and _after(delivered_at, failed_at):
                continue  # Honcho took a delivery since: the outage that failed it is over
            found.append((FAILING, f"{name} failed {failures} times in a row (last: {code})"))
    return found


def _after(later: Any, earlier: Any) -> bool:
    numbers = isinstance(later, int | float) and isinstance(earlier, int | float)
    return numbers and later > earlier


def _parked(
    parked: dict[str, Any], outbox: dict[str, Any], now: float | None
) -> list[tuple[str, str]]:
    """Failing while a conversation's deliveries keep failing on Honcho, from the first of its
    failures until every parked conversation has delivered (``store/parked.py``)."""
    count = parked.get("conversations") or 0
    since = parked.get("since")
    if not count or not isinstance(since, int | float) or outbox.get("conversations_pending") == 0:
        return []  # nothing waits on Honcho (a park outliving its delivery is moot)
    if (parked.get("most_failures") or 0) < FAILING_AFTER:
        return []  # a retry or two is ordinary weather
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    ago = f" ({max(0.0, now - since):.0f} s ago)" if isinstance(now, int | float) else ""
    return [
        (
            FAILING,
            f"{count} conversation(s) cannot deliver: failing since {at}{ago},"
            f" last error {parked.get('last_code') or 'unknown'}",
        )
    ]


def _pending(outbox: dict[str, Any], current: Settings) -> list[tuple[str, str]]:
    age = outbox.get("oldest_pending_age_s")
    limit = STALL_SWEEPS * current.sweep_interval_s
    if isinstance(age, int | float) and age > limit:
        return [
            (
                STALLED,
                f"the oldest pending record is {age:.0f} s old (over {limit:.0f} s,"
                f" {STALL_SWEEPS} sweep intervals)",
            )
        ]
    return []


def _consumers(tasks: dict[str, Any], queues: dict[str, Any]) -> list[tuple[str, str]]:
    consumers = tasks.get("consumers")
    depths = queues.get("depths")
    if not isinstance(consumers, dict) or not isinstance(depths, dict):
        return []  # not known: the unread source is reported as such
    waiting = {q: d for q, d in depths.items() if d and not consumers.get(q)}
    idle = [q for q, d in depths.items() if not d and not consumers.get(q)]
    found = []
    if waiting:
        total = sum(waiting.values())
        found.append(
            (
                STALLED,
                f"{total} message(s) wait in {', '.join(waiting)} and no live worker consumes"
                f" {'it' if len(waiting) == 1 else 'them'}",
            )
        )
    if idle:
        found.append((DEGRADED, f"no live worker consumes {', '.join(idle)}"))
    return found


def _beats(tasks: dict[str, Any]) -> list[tuple[str, str]]:
    beats = tasks.get("live_beats")
    if beats == 0:
        return [(DEGRADED, "no beat is running: the sweep and refreshes never fire")]
    if isinstance(beats, int) and beats > 1:
        return [(DEGRADED, f"{beats} beats are running: periodic tasks fire more than once")]
    return []


def _other_workers(workers: dict[str, Any]) -> list[tuple[str, str]]:
    """Workers on this broker that serve another data directory or store take this
    deployment's hints from the shared queues and deliver nothing of it (``status.workers``);
    they are no consumers, so with no worker of this deployment ``_consumers`` finds the
    queues unconsumed too."""
    strangers = [w for w in workers.get("seen") or [] if w.get("this_deployment") is False]
    if not strangers:
        return []
    listed = "; ".join(f"{w['name']} serves {w.get('serves')}" for w in strangers)
    return [
        (
            DEGRADED,
            f"{len(strangers)} worker(s) on this broker serve another deployment ({listed}):"
            " give them this deployment's data dir and store_url, or a broker of their own",
        )
    ]


def _relay(config: dict[str, Any], current: Settings) -> list[tuple[str, str]]:
    """No outbox relay while ``memhoncho capture``'s records wait for one (``relay_watch``)."""
    if config.get("relay") != "missing":
        return []
    return [
        (
            DEGRADED,
            f"no outbox relay is running and {config.get('relay_waiting')} conversation(s)"
            " captured by `memhoncho capture` wait for it, until the sweep (up to"
            f" {current.sweep_interval_s:.0f} s): run `memhoncho relay` beside the workers",
        )
    ]


def _stranded(view: dict[str, Any]) -> list[tuple[str, str]]:
    """Pending records and nothing queued or running for them (``status/stranded.py``): the
    workers' watchdog enqueues them within seconds, so one that stays means it cannot."""
    total, ids, late = stranded.described(view)
    if not total:
        return []
    what = f"{total} conversation(s) have pending records and nothing queued or running for them"
    if late:
        return [
            (
                FAILING,
                f"{what}; past their bound by over {stranded.FAILING_PAST_S:.0f} s:"
                f" {', '.join(late)} (does a worker of this deployment run?)",
            )
        ]
    return [(DEGRADED, f"{what} (the workers' watchdog enqueues them again): {', '.join(ids)}")]
