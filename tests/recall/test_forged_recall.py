"""A process on the broker cannot read or plant anyone's memory: a recall or remember task it
pushes (no proof, a forged proof, or a real proof moved onto another call) is refused by a real
worker, answers nothing of anyone's, stores nothing in Honcho, and is counted in the status."""

from __future__ import annotations

import json
from typing import Any

import celery_support
import pytest
from celery import Celery

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.recall import tools
from memhoncho.status.view import status_view
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.seed import seed_conversation
from memhoncho.worker import routing, task_proof

SECRET_KEY = "sk-memhoncho-forged-recall-KEY-1234"
BOB = "bob@example.com"
WAIT_S = 30.0
pytestmark = [pytest.mark.slow, pytest.mark.standin(llm=True, api_key=SECRET_KEY)]


settings = celery_support.settings_fixture(SECRET_KEY)  # fixtures
recall_worker = celery_support.recall_worker


def _attacker(redis_url: str) -> Celery:
    """Anyone who can reach the broker: its URL, nothing of the deployment's settings."""
    return Celery("attacker", broker=redis_url, backend=redis_url)


def _push(app: Celery, task_id: str, name: str, arguments: Any, owner: str, **kwargs: Any) -> Any:
    return app.send_task(
        routing.RECALL_TASK,
        args=[name, arguments, owner],
        kwargs=kwargs,
        queue=routing.RECALL_QUEUE,
        routing_key=routing.RECALL_QUEUE,
        task_id=task_id,
    ).get(timeout=WAIT_S)


def test_forged_recall_and_remember_tasks_are_refused_and_counted(
    host: Host,
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    redis_url: str,
    recall_worker: None,
) -> None:
    seed_conversation(deployment, "bob-run", BOB, ["bob's secret knee problem"])
    assert host.call_tool(tools.SEARCH, {"query": "knee"}, owner=BOB, via="celery")["count"] == 1
    attacker = _attacker(redis_url)
    search = {"query": "knee"}
    real = task_proof.proof(SECRET_KEY, "t-real", tools.SEARCH, search, BOB)
    answers = [
        _push(attacker, "t-none", tools.SEARCH, search, BOB),
        _push(attacker, "t-forged", tools.SEARCH, search, BOB, proof="0" * 64),
        # a proof seen on the wire, replayed onto another task and another owner
        _push(attacker, "t-moved", tools.SEARCH, search, BOB, proof=real),
        _push(attacker, "t-plant", tools.REMEMBER, {"content": "Bob owes me money."}, BOB),
    ]
    try:
        for answer in answers:
            assert answer["ok"] is False
            assert answer["error"]["code"] == "ERR_TASK_REFUSED"
            assert "knee" not in json.dumps(answer) and BOB not in json.dumps(answer)
        assert standin.conclusions(workspace_id) == []  # nothing planted
        view = status_view(deployment)
        assert view["refused_tasks"]["count"] == len(answers)
        assert any("recall task(s) refused" in r for r in view["health"]["reasons"])
        assert view["health"]["verdict"] == "failing"
    finally:
        attacker.close()


def test_what_monitors_see_of_a_recall_call_holds_no_query_owner_or_proof(
    host: Host, redis_url: str, recall_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower and ``celery events`` show a task's ``argsrepr`` and ``kwargsrepr``."""
    sent: list[dict[str, Any]] = []
    real = Celery.send_task

    def recording(app: Celery, name: str, *args: Any, **options: Any) -> Any:
        sent.append(options)
        return real(app, name, *args, **options)

    monkeypatch.setattr(Celery, "send_task", recording)
    host.call_tool(tools.SEARCH, {"query": "my secret knee"}, owner=BOB, via="celery")
    (options,) = sent
    shown = options["argsrepr"] + options["kwargsrepr"]
    assert "knee" not in shown and BOB not in shown
    assert options["kwargs"]["proof"] not in shown
