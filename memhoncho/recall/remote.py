"""The host's side of a recall tool run by a worker: enqueue on ``memhoncho.recall``, wait.

The call is checked before it is sent, so a bad call never reaches the broker. The wait is the
tool's own timeout plus a margin for the queue; past it the host gets ``HonchoTimeout`` and the
task expires unstarted rather than answering no one. Errors come back typed, as in process.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import HonchoFailure, HonchoTimeout, HonchoUnavailable
from memhoncho.recall import tools
from memhoncho.worker import routing

log = logging.getLogger(__name__)

RECALL_TASK = routing.RECALL_TASK  # routed to routing.RECALL_QUEUE, never behind deliveries
QUEUE_MARGIN_S = 5.0  # seconds, on top of the tool's timeout, for the trip through the broker
RESULT_POLL_S = 0.05  # seconds between result checks where the backend is polled


def call_via_celery(
    app: Celery, deployment: Deployment, name: object, arguments: Any, owner: str | None
) -> dict[str, Any]:
    """Run the tool on a recall worker and return its result, or raise its typed error."""
    tool, checked = tools.check_call(name, arguments)
    ids.peer_id(owner)
    wait_s = tool.timeout_s(deployment.settings()) + QUEUE_MARGIN_S
    try:
        pending = app.send_task(
            RECALL_TASK, args=[tool.name, checked, owner], retry=False, expires=wait_s
        )
    except Exception as exc:  # the broker is down or refused the publish
        log.warning(
            "recall not enqueued",
            extra={
                "action": "recall_enqueue_failed",
                "tool": tool.name,
                "error": type(exc).__name__,
            },
        )
        raise HonchoUnavailable(
            f"memhoncho {tool.name}: memhoncho's task broker is unreachable; try again later",
            via="celery",
        ) from None
    try:
        outcome = pending.get(timeout=wait_s, interval=RESULT_POLL_S, propagate=True)
    except CeleryTimeout:
        # unclear: a worker may have started it and may still finish (a remember, stored).
        raise HonchoTimeout(
            f"memhoncho {tool.name}: no recall worker answered within {wait_s:g} s",
            via="celery",
            unclear=True,
        ) from None
    except Exception as exc:  # the task died (time limit, lost worker), or the results did
        raise HonchoFailure(
            f"memhoncho {tool.name}: the recall worker failed ({type(exc).__name__})",
            via="celery",
        ) from None
    finally:
        _forget(pending)
    if not isinstance(outcome, dict) or "ok" not in outcome:
        raise HonchoFailure(f"memhoncho {tool.name}: the recall worker sent no outcome")
    if outcome["ok"]:
        return dict(outcome["result"])
    raise tools.error_from_payload(outcome.get("error") or {})


def _forget(pending: Any) -> None:
    """Drop the answer from the result backend; never a reason to replace the outcome (a
    backend that keeps nothing cannot forget, one that is down keeps it until it expires)."""
    try:
        pending.forget()
    except Exception as exc:  # noqa: BLE001 - bookkeeping only, the outcome stands
        log.debug(
            "recall result not forgotten",
            extra={"action": "recall_forget_failed", "error": type(exc).__name__},
        )
