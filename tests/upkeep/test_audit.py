"""``memhoncho audit``: planted damage in Honcho is reported exactly, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memhoncho import cli, ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.runs import run_event
from memhoncho.upkeep.audit import audit
from memhoncho.upkeep.sweep import sweep

KEY = "sk-audit-test-key"
pytestmark = pytest.mark.standin(api_key=KEY)
OWNER = "ana@example.com"
CONVERSATION = "conv-audit"
OTHER = "conv-clean"


@pytest.fixture
def deployment(
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    store_url: str | None,
) -> Iterator[Deployment]:
    """Two conversations delivered, on each store."""
    write_settings(config_dir, base_url=standin.url, workspace_id=workspace_id, store_url=store_url)
    write_api_key(config_dir, KEY)
    deployment = Deployment(config_dir, data_dir)
    with Host(config_dir, data_dir) as host:
        for conversation in (CONVERSATION, OTHER):
            for i in range(5):
                host.capture(run_event(conversation, i, OWNER))
            deliver_conversation(deployment, conversation)
    yield deployment


def stored(standin: HonchoStandIn, workspace_id: str) -> list[dict[str, Any]]:
    return standin.messages(workspace_id, ids.session_id(workspace_id, CONVERSATION))


def plant(standin: HonchoStandIn, workspace_id: str, messages: list[dict[str, Any]]) -> None:
    standin.plant_messages(workspace_id, ids.session_id(workspace_id, CONVERSATION), messages)


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def only_problem(result: Any, **expected: Any) -> None:
    """Every problem list is empty but the ones named."""
    empty: dict[str, Any] = {
        "missing": [],
        "missing_unnamed": 0,
        "duplicated": {},
        "out_of_order": [],
        "unknown": [],
        "unrecorded": [],
    }
    found = result.model_dump(mode="json", include=set(empty))
    assert found == {**empty, **expected}


def test_an_intact_delivery_audits_clean_and_the_audit_writes_nothing(
    deployment: Deployment, standin: HonchoStandIn, data_dir: Path
) -> None:
    before = files(data_dir)
    requests = standin.request_count()
    held = standin.state()["workspaces"]
    report = audit(deployment)

    assert report.ok
    found = sorted((a.conversation_id, a.held, a.delivered) for a in report.conversations)
    assert found == [(CONVERSATION, 10, 10), (OTHER, 10, 10)]
    assert files(data_dir) == before
    assert standin.state()["workspaces"] == held
    sent = {path.rsplit("/", 1)[1] for _, path, _ in standin.state()["requests"][requests:]}
    assert sent == {"list", "workspaces"}  # messages/list, and the SDK's workspace get


def test_a_planted_duplicate_is_reported_with_both_honcho_ids(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    messages = stored(standin, workspace_id)
    copy = {**messages[3], "id": "planted-copy"}
    plant(standin, workspace_id, [*messages, copy])
    [result] = audit(deployment, CONVERSATION).conversations

    oid = messages[3]["metadata"][OUTBOX_ID_KEY]
    only_problem(result, duplicated={oid: [messages[3]["id"], "planted-copy"]})


def test_a_planted_gap_is_reported_as_exactly_the_missing_message(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    messages = stored(standin, workspace_id)
    plant(standin, workspace_id, messages[:4] + messages[5:])
    [result] = audit(deployment, CONVERSATION).conversations

    only_problem(result, missing=[messages[4]["metadata"][OUTBOX_ID_KEY]])


def test_a_planted_swap_is_reported_as_exactly_the_two_swapped_messages(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    messages = stored(standin, workspace_id)
    swapped = [*messages[:2], messages[6], *messages[3:6], messages[2], *messages[7:]]
    plant(standin, workspace_id, swapped)
    [result] = audit(deployment, CONVERSATION).conversations

    def oid(message: dict[str, Any]) -> str:
        return str(message["metadata"][OUTBOX_ID_KEY])

    only_problem(
        result,
        out_of_order=[
            {
                "outbox_id": oid(messages[6]),
                "honcho_id": messages[6]["id"],
                "stored_at": 2,
                "stored_after": oid(messages[1]),
            },
            {
                "outbox_id": oid(messages[2]),
                "honcho_id": messages[2]["id"],
                "stored_at": 6,
                "stored_after": oid(messages[5]),
            },
        ],
    )


def test_a_message_no_outbox_accounts_for_is_unknown(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    client = adapter.write_client(deployment.honcho_target())
    sid = ids.session_id(workspace_id, CONVERSATION)
    [foreign] = adapter.add_messages(client, sid, [adapter.OutgoingMessage("agent", "hi")])
    [result] = audit(deployment, CONVERSATION).conversations

    only_problem(result, unknown=[foreign])


def test_after_the_sweep_compacts_the_outbox_a_gap_is_still_named(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    sweep(deployment, lambda _: True)  # delivered records leave the outbox
    assert audit(deployment).ok
    messages = stored(standin, workspace_id)
    plant(standin, workspace_id, messages[:4] + messages[5:])
    [result] = audit(deployment, CONVERSATION).conversations

    only_problem(result, missing=[messages[4]["metadata"][OUTBOX_ID_KEY]])


def test_the_command_exits_1_on_damage_and_its_json_names_it(
    deployment: Deployment,
    standin: HonchoStandIn,
    workspace_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["audit"]) == 0
    assert "every delivered message is in Honcho once" in capsys.readouterr().out
    messages = stored(standin, workspace_id)
    plant(standin, workspace_id, [*messages, {**messages[0], "id": "again"}])

    assert cli.main(["audit", "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["ok"] is False
    assert found["totals"]["duplicated"] == 1 and found["totals"]["wrong"] == 1
    assert cli.main(["audit", "--conversation", OTHER]) == 0
    assert cli.main(["audit"]) == 1
    assert "duplicated" in capsys.readouterr().out
