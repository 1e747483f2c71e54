"""What ``memhoncho doctor`` asks of the broker it is given: that it answers, and that a
recall run by a worker can answer back (the result backend the broker's kind gets).

A broker that answers while recall answers no one is the trap this avoids: hints flow,
deliveries work, and every ``call_tool(..., via="celery")`` fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memhoncho.settings.values import broker_kind

CONNECT_TIMEOUT_S = 2.0  # seconds to reach the broker
PROBE_KEY = "memhoncho-doctor-probe"  #: a result nobody stores, read to prove the backend answers


@dataclass(frozen=True)
class BrokerVerdict:
    ok: bool
    detail: str
    fix: str = ""


_NAMES = {"redis": "Redis", "rabbitmq": "RabbitMQ", "embedded": "the embedded broker"}


def check(app: Any, timeout_s: float = CONNECT_TIMEOUT_S) -> BrokerVerdict:
    """Connect to ``app``'s broker, then read one result from its result backend."""
    url = app.conf.broker_url
    kind = broker_kind(None if url == "filesystem://" else url)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure to reach it is the verdict
        return BrokerVerdict(
            False,
            f"the {kind} broker is unreachable ({type(exc).__name__})",
            f"start the broker ({_NAMES.get(kind, kind)}) or fix broker_url; captures wait on disk",
        )
    backend = app.backend
    if type(backend).__name__ == "DisabledBackend":
        return BrokerVerdict(
            False,
            f"the {kind} broker answers, but recall through a worker has no result backend",
            "set store_url to a postgresql:// store, or use Redis as the broker",
        )
    try:
        backend.get_task_meta(PROBE_KEY)
    except Exception as exc:  # noqa: BLE001
        return BrokerVerdict(
            False,
            f"the {kind} broker answers; its result backend does not ({type(exc).__name__})",
            "make the store (or Redis) reachable: recall through a worker answers there",
        )
    where = type(backend).__name__.removesuffix("Backend").lower() or "results"
    return BrokerVerdict(True, f"the {kind} broker answers; recall answers through {where}")
