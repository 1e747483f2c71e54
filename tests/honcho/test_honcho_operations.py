"""memhoncho.honcho.adapter's typed operations over the real SDK against the stand-in: clients,
sessions and their config, messages, clones, search, chat, conclusions."""

from __future__ import annotations

import os

import httpx
import pytest
from honcho import Honcho
from honcho.http import exceptions as sdk

from memhoncho.errors import (
    HonchoNoLLM,
    HonchoRejected,
    HonchoTimeout,
    HonchoUnavailable,
)
from memhoncho.honcho import adapter
from memhoncho.honcho.adapter import HonchoTarget, OutgoingMessage
from memhoncho.testing import HonchoStandIn

FAST_TIMEOUT_S = 0.3  # seconds
FAULT_SLEEP_S = 0.6  # seconds, past FAST_TIMEOUT_S


@pytest.fixture
def target(standin: HonchoStandIn, workspace_id: str) -> HonchoTarget:
    return HonchoTarget(base_url=standin.url, api_key="k", workspace_id=workspace_id, timeout_s=5)


def _time_out_every_message_after_commit(standin: HonchoStandIn) -> None:
    """Every message POST is stored, then answered too late for the client's timeout."""
    standin.faults.add(
        "timeout_after_commit",
        count=None,
        method="POST",
        path_contains="/messages",
        sleep_s=FAULT_SLEEP_S,
    )


def test_a_retried_add_messages_with_max_retries_zero_stores_once(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    target = HonchoTarget(standin.url, "k", workspace_id, timeout_s=FAST_TIMEOUT_S)
    client = adapter.write_client(target)
    adapter.ensure_session(client, "s1", "ana", "agent")
    _time_out_every_message_after_commit(standin)
    with pytest.raises(HonchoTimeout) as caught:
        adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
    assert adapter.classify(caught.value, 1).unclear
    assert len(standin.messages(workspace_id, "s1")) == 1
    assert standin.request_count(path_contains="/messages", method="POST") == 1


def test_the_sdk_default_of_two_retries_stores_a_timed_out_message_three_times(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = Honcho(
        base_url=standin.url, api_key="k", workspace_id=workspace_id, timeout=FAST_TIMEOUT_S
    )
    session, ana = client.session("s1"), client.peer("ana")
    _time_out_every_message_after_commit(standin)
    with pytest.raises(sdk.TimeoutError):
        session.add_messages([ana.message("hello")])
    client._http.close()
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["hello"] * 3


def test_clients_are_cached_per_process_and_target(
    target: HonchoTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = adapter.write_client(target)
    assert adapter.write_client(target) is write
    assert write._http.max_retries == 0
    read = adapter.read_client(target, timeout_s=2.0)
    assert read is not write and read._http.max_retries == 0 and read._http.timeout == 2.0
    rotated = HonchoTarget(target.base_url, "rotated-key", target.workspace_id, target.timeout_s)
    fresh = adapter.write_client(rotated)
    assert fresh is not write and fresh._http.api_key == "rotated-key"
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)  # as in a forked worker
    assert adapter.write_client(rotated) is not fresh


def test_ensure_session_configures_members_before_the_first_message(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    adapter.ensure_session(client, "s1", "ana", "agent", {"conversation": "c1"})
    adapter.add_messages(
        client, "s1", [OutgoingMessage("ana", "hi"), OutgoingMessage("agent", "hello")]
    )
    ws = target.workspace_id
    assert standin.peer_config(ws, "s1", "ana") == {"observe_me": True, "observe_others": False}
    assert standin.peer_config(ws, "s1", "agent") == {"observe_me": False, "observe_others": True}
    session = standin.sessions(ws)[0]
    assert session["metadata"] == {"conversation": "c1"}
    assert session["configuration"] == {"summary": {"enabled": True}, "dream": {"enabled": True}}
    requests = [(method, path) for method, path, _ in standin.state()["requests"]]
    first_message = next(i for i, (_, p) in enumerate(requests) if p.endswith("/messages"))
    # the workspace (a client's first call), then the session created with its members
    assert [p.rsplit("/", 1)[-1] for _, p in requests[:first_message]] == [
        "workspaces",
        "sessions",
    ]


def test_ensure_session_sets_the_config_again_on_a_session_it_did_not_create(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    assert adapter.ensure_session(client, "s1", "ana", "agent") == 1  # created: 201
    ws = target.workspace_id
    client.session("late").add_messages([client.peer("agent").message("first")])
    assert standin.peer_config(ws, "late", "agent") == {}  # auto-added by its message

    assert adapter.ensure_session(client, "late", "ana", "agent") == 3  # found (200): set again
    assert standin.peer_config(ws, "late", "agent") == {"observe_me": False, "observe_others": True}
    assert standin.peer_config(ws, "late", "ana") == {"observe_me": True, "observe_others": False}
    assert adapter.ensure_session(client, "s1", "ana", "agent") == 3  # found: set again


def test_ensure_session_through_a_client_it_cannot_hear_the_status_of_sets_the_config_again(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    # a plain SDK client (the status of its answers is not reported): never taken as created
    client = Honcho(
        base_url=target.base_url,
        api_key=target.api_key,
        workspace_id=target.workspace_id,
        max_retries=0,
    )
    assert adapter.ensure_session(client, "s1", "ana", "agent") == 3
    assert standin.request_count(path_contains="/config", method="PUT") == 2


def test_add_messages_refuses_more_than_one_hundred_without_a_request(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    messages = [OutgoingMessage("ana", f"m{i}") for i in range(101)]
    with pytest.raises(HonchoRejected):
        adapter.add_messages(adapter.write_client(target), "s1", messages)
    assert standin.request_count() == 0
    assert adapter.add_messages(adapter.write_client(target), "s1", []) == []


def test_add_messages_keeps_metadata_and_created_at_and_answers_ids_in_order(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    from datetime import UTC, datetime

    when = datetime(2022, 2, 2, 12, 0, tzinfo=UTC)
    client = adapter.write_client(target)
    ids = adapter.add_messages(
        client,
        "s1",
        [OutgoingMessage("ana", "one", {"k": 1}, when), OutgoingMessage("agent", "two")],
    )
    listed = adapter.list_messages(client, "s1")
    assert [m["id"] for m in listed] == ids
    assert listed[0]["metadata"] == {"k": 1} and listed[0]["created_at"] == when


def test_find_outbox_ids_pages_through_more_than_one_page(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    key = "memhoncho_outbox_id"
    ids = []
    for start in (0, 100):
        ids += adapter.add_messages(
            client,
            "s1",
            [OutgoingMessage("ana", f"m{i}", {key: f"ob{i}"}) for i in range(start, start + 100)],
        )
    before = standin.request_count(path_contains="/messages/list")
    found = adapter.find_outbox_ids(client, "s1", key, [f"ob{i}" for i in range(200)] + ["nope"])
    assert found == {f"ob{i}": ids[i] for i in range(200)}
    assert standin.request_count(path_contains="/messages/list") - before >= 3


def test_find_outbox_ids_names_the_first_copy_of_a_duplicate(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    key = "memhoncho_outbox_id"
    first = adapter.add_messages(client, "s1", [OutgoingMessage("ana", "m", {key: "ob1"})])
    adapter.add_messages(client, "s1", [OutgoingMessage("ana", "m", {key: "ob1"})])
    assert adapter.find_outbox_ids(client, "s1", key, ["ob1"]) == {"ob1": first[0]}


def test_a_clone_can_be_found_again_by_its_metadata(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    adapter.ensure_session(client, "parent", "ana", "agent", {"conversation": "p"})
    ids = adapter.add_messages(
        client, "parent", [OutgoingMessage("ana", f"m{i}") for i in range(3)]
    )
    child = adapter.clone_session(client, "parent", ids[1])
    adapter.set_session_metadata(client, child, {"memhoncho_fork_of": "p", "child": "c"})
    found = adapter.find_sessions(client, {"child": "c"})
    assert [s["id"] for s in found] == [child]
    assert [m["content"] for m in adapter.list_messages(client, child)] == ["m0", "m1"]
    with pytest.raises(HonchoRejected) as caught:
        adapter.clone_session(client, "parent", "no_such_message")
    assert caught.value.status == 404


def test_search_user_messages_returns_only_the_users_messages_as_dicts(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    adapter.add_messages(
        client,
        "s1",
        [OutgoingMessage("ana", "I love figs"), OutgoingMessage("agent", "figs are great")],
    )
    found = adapter.search_user_messages(adapter.read_client(target), "ana", "FIGS", limit=500)
    assert [(m["content"], m["session_id"]) for m in found] == [("I love figs", "s1")]
    assert set(found[0]) == {"content", "peer_id", "session_id", "created_at", "metadata"}


def test_chat_without_an_llm_is_honcho_no_llm(target: HonchoTarget) -> None:
    with pytest.raises(HonchoNoLLM) as caught:
        adapter.chat(adapter.read_client(target), "agent", "ana", "tea?", "minimal", 5.0)
    assert caught.value.status == 500


def test_chat_when_honcho_is_down_stays_unavailable(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    standin.faults.add("http_503", path_contains="/chat")
    with pytest.raises(HonchoUnavailable):
        adapter.chat(adapter.read_client(target), "agent", "ana", "tea?")


def test_chat_with_an_llm_answers_and_an_empty_answer_is_no_llm(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    standin.llm = True
    client = adapter.read_client(target)
    adapter.create_conclusion(client, "agent", "ana", "Ana drinks green tea")
    assert "Ana drinks green tea" in adapter.chat(client, "agent", "ana", "tea?", "low")

    def empty(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat"):
            return httpx.Response(200, json={"content": None})
        return httpx.Response(200, json={"id": "w", "created_at": "2024-01-01T00:00:00Z"})

    silent = Honcho(
        base_url="http://honcho.invalid",
        api_key="k",
        workspace_id="w",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(empty)),
    )
    with pytest.raises(HonchoNoLLM):
        adapter.chat(silent, "agent", "ana", "tea?")
    silent._http._client.close()


def test_conclusions_representation_and_context_come_back_plain(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    client = adapter.write_client(target)
    adapter.ensure_session(client, "s1", "ana", "agent")
    adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
    assert adapter.representation(client, "agent", "ana") == ""
    made = adapter.create_conclusion(client, "agent", "ana", "Ana gardens", "s1")
    assert made["content"] == "Ana gardens" and made["session_id"] == "s1"
    assert adapter.representation(client, "agent", "ana", "s1") == "Ana gardens"
    standin.set_summary(target.workspace_id, "s1", "Ana greeted the agent.")
    context = adapter.session_context(client, "s1", 1000, "ana", "agent")
    assert context == {
        "summary": "Ana greeted the agent.",
        "peer_representation": "Ana gardens",
        "peer_card": None,
        "messages": 1,
    }


def test_conclusions_without_embeddings_are_honcho_no_llm(
    standin: HonchoStandIn, target: HonchoTarget
) -> None:
    standin.embeddings = False
    with pytest.raises(HonchoNoLLM):
        adapter.create_conclusion(adapter.write_client(target), "agent", "ana", "Ana gardens")
