"""``doctor``'s ``stranded`` check: conversations with pending records and nothing queued or
running for them (``status/stranded.py``, the same bucket the status view shows).

The workers' watchdog enqueues such a conversation within seconds of its bound, so one still
there ``GRACE_S`` past it means no watchdog serves this deployment or it cannot publish.
"""

from __future__ import annotations

from memhoncho.cli.exits import count
from memhoncho.deployment import Deployment
from memhoncho.errors import MemhonchoError

#: doctor's verdicts (``doctor.PASS`` ...), restated: doctor imports this module
PASS, WARN, FAIL = "pass", "warn", "fail"

#: seconds past its bound a conversation may wait for the watchdog (the issue's promise)
GRACE_S = 15.0


def finding(deployment: Deployment) -> tuple[str, str, str]:
    """(verdict, detail, action) of the ``stranded`` check."""
    from memhoncho.status import stranded

    try:
        found = stranded.bucket(deployment, deployment.settings())
    except MemhonchoError as exc:
        return WARN, f"not checked: {exc.code}: {exc.message}", "fix the store"
    total = found["count"]
    if not total:
        return PASS, "every conversation with pending records has a delivery", ""
    named = found["conversations"]
    late = [c["conversation_id"] for c in named if c["past_bound_s"] > GRACE_S]
    ids = ", ".join(c["conversation_id"] for c in named)
    action = (
        "start a worker of this deployment (its watchdog enqueues them again),"
        " or run `memhoncho sweep`"
    )
    if late:
        return (
            FAIL,
            f"{count(total, 'conversation')} with pending records and nothing queued or"
            f" running, {len(late)} over {GRACE_S:.0f} s past their bound: {', '.join(late)}",
            action,
        )
    return (
        WARN,
        f"{count(total, 'conversation')} just stranded, the watchdog's next look takes them: {ids}",
        action,
    )
