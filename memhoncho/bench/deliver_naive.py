"""The naive baseline of ``memhoncho bench deliver``: one task and one add_messages call per run.

No outbox, no lock, no ledger, no dedup and no coalescing: the host puts the run's messages
in the task and a worker stores them with one call. It is cheaper per call than memhoncho's
delivery and gives none of its guarantees (a retry duplicates, two workers reorder). Workers
load it only for the benchmark (``celery worker --include memhoncho.bench.deliver_naive``);
only the bench imports it, for the names below.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memhoncho.honcho import adapter
from memhoncho.worker.tasks import task_context

NAIVE_TASK = "memhoncho.bench_naive_deliver"
NAIVE_QUEUE = "memhoncho.bench-naive"

_sessions: set[tuple[int, str]] = set()  # (pid, session id) this process has set up


# A shared task, as memhoncho's own: it binds to the worker's app, so importing this module
# (the bench itself does, for the names above) builds no app.
@shared_task(name=NAIVE_TASK, bind=True, ignore_result=True, acks_late=True)
def naive_deliver(
    task: Any, session_id: str, user_peer_id: str, messages: list[dict[str, Any]]
) -> None:
    """Store one run's messages: the session once per process, then one add_messages."""
    import os

    deployment = task_context(task.app)
    agent = deployment.settings().agent_peer_id
    client = adapter.write_client(deployment.honcho_target())
    if (os.getpid(), session_id) not in _sessions:
        adapter.ensure_session(client, session_id, user_peer_id, agent)
        _sessions.add((os.getpid(), session_id))
    outgoing = [
        adapter.OutgoingMessage(m["peer_id"], m["content"], m.get("metadata") or {})
        for m in messages
    ]
    adapter.add_messages(client, session_id, outgoing)
