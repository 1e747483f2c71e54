"""The host's side of a recall tool run by a worker: enqueue on ``memhoncho.recall``, wait.

The call is checked before it is sent, so a bad call never reaches the broker. The wait is the
tool's own timeout plus a margin for the queue; past it the host gets ``HonchoTimeout`` and a
search or chat expires unstarted rather than answering no one. A remember never expires: its
task id is its idempotency key, and a Celery worker refuses a revoked (expired) id for hours, so
an expiry would turn every retry of that remember into a failure; run late, it is stored once
and answers the retry. Errors come back typed, as in process.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from celery import Celery, states
from celery.exceptions import TimeoutError as CeleryTimeout

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoFailure,
    HonchoTimeout,
    HonchoUnavailable,
    MemhonchoError,
    MissingApiKey,
    TaskRefused,
)
from memhoncho.recall import tools
from memhoncho.worker import routing, task_proof

log = logging.getLogger(__name__)

RECALL_TASK = routing.RECALL_TASK  # routed to routing.RECALL_QUEUE, never behind deliveries
QUEUE_MARGIN_S = 5.0  # seconds, on top of the tool's timeout, for the trip through the broker
#: the namespace of remember task ids (``task_id_for``); fixed, so every host derives the same
REMEMBER_NAMESPACE = uuid.UUID("6d656d68-6f6e-6368-6f2d-72656d656d62")
RESULT_POLL_S = 0.05  # seconds between result checks where the backend is polled


def call_via_celery(
    app: Celery, deployment: Deployment, name: object, arguments: Any, owner: str | None
) -> dict[str, Any]:
    """Run the tool on a recall worker and return its result, or raise its typed error."""
    tool, checked = tools.check_call(name, arguments)
    ids.peer_id(owner)
    wait_s = tool.timeout_s(deployment.settings()) + QUEUE_MARGIN_S
    remembered = task_id_for(tool.name, checked, owner)
    if remembered is not None:
        _forget_failure(app, remembered)
    task_id = remembered or str(uuid.uuid4())
    api_key = deployment.api_key()
    if api_key is None:  # nothing to prove the call with, and no worker could call Honcho
        raise MissingApiKey(f"memhoncho {tool.name}: no Honcho API key is configured")
    try:
        pending = app.send_task(
            RECALL_TASK,
            args=[tool.name, checked, owner],
            kwargs={"proof": task_proof.proof(api_key, task_id, tool.name, checked, owner)},
            # What monitors (Flower, celery events, the worker's log) show of the call: the
            # tool, never the query, the fact to remember, the owner or the proof.
            argsrepr=f"({tool.name!r}, <arguments>, <owner>)",
            kwargsrepr="{'proof': <hidden>}",
            retry=False,
            expires=wait_s if remembered is None else None,  # a remember: the docstring
            task_id=task_id,
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
        if remembered is None:  # a remember's answer stays: it answers the caller's retries
            _forget(pending)
    if not isinstance(outcome, dict) or "ok" not in outcome:
        raise HonchoFailure(f"memhoncho {tool.name}: the recall worker sent no outcome")
    if outcome["ok"]:
        return dict(outcome["result"])
    raise tools.error_from_payload(outcome.get("error") or {})


def task_id_for(name: str, checked: Any, owner: str | None) -> str | None:
    """A remember's idempotency key: the task id derived from the call (the tool, the user,
    the checked arguments), so a caller's retry is the same task and is stored once
    (``results.once``). None for the read-only tools: any attempt may answer them."""
    if name != tools.REMEMBER:
        return None
    call = json.dumps([name, ids.peer_id(owner), checked], sort_keys=True, default=str)
    return str(uuid.uuid5(REMEMBER_NAMESPACE, call))


def worker_outcome(
    backend: Any,
    task_id: str,
    deployment: Deployment,
    name: str,
    arguments: Any,
    owner: str | None,
    proof: object = None,
) -> dict[str, Any]:
    """The worker's side: the call's proof checked (``task_proof``), then ``tools.outcome``,
    with a remember run once per task id."""
    if not task_proof.verify(deployment.api_key(), proof, task_id, name, arguments, owner):
        return _refused(deployment, name)
    if name != tools.REMEMBER or not task_id:
        return tools.outcome(deployment, name, arguments, owner)
    from memhoncho.results import once

    tool, _ = tools.check_call(name, arguments)
    wait_s = tool.timeout_s(deployment.settings()) + QUEUE_MARGIN_S
    late = HonchoTimeout(
        f"memhoncho {name}: an earlier attempt of this remember is still running",
        via="celery",
        unclear=True,
    )
    return once.run_once(
        backend,
        task_id,
        lambda: tools.outcome(deployment, name, arguments, owner),
        wait_s,
        lambda: {"ok": False, "error": tools.error_payload(late)},
    )


def _refused(deployment: Deployment, name: object) -> dict[str, Any]:
    """A call without the deployment's proof: not run, logged, counted (the status view's
    ``refused_tasks``); its answer names no owner and holds nothing."""
    from memhoncho.store import counters

    shown = name if isinstance(name, str) and name in tools.TOOLS else "?"
    log.warning(
        "a recall task without the deployment's proof was refused",
        extra={"action": "recall_refused", "tool": shown},
    )
    try:
        counters.add_one(deployment.layout, counters.REFUSED_TASKS, f"{shown}: no valid proof")
    except MemhonchoError:
        pass  # a full disk: the log line above is what is left
    refused = TaskRefused("memhoncho refused a recall task that did not prove its origin")
    return {"ok": False, "error": tools.error_payload(refused)}


def _forget_failure(app: Celery, task_id: str) -> None:
    """An earlier attempt's end that is not an answer (a typed error, a lost worker, a revoke)
    must not answer this retry: it is dropped, so the retry waits for its own outcome. An
    earlier success stays (it is the answer, stored once), and so does a running attempt."""
    try:
        meta = app.backend.get_task_meta(task_id, cache=False)
        answer = meta.get("result")
        answered = meta.get("status") == "SUCCESS" and isinstance(answer, dict) and answer.get("ok")
        if meta.get("status") in states.READY_STATES and not answered:
            app.backend.forget(task_id)
    except Exception as exc:  # noqa: BLE001 - the results are down: the wait below says so
        log.debug(
            "earlier recall answer not read",
            extra={"action": "recall_forget_failed", "error": type(exc).__name__},
        )


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
