"""The Honcho stand-in, driven by the real honcho-ai SDK over HTTP.

Every contract scenario runs here (so none can rot), then what only a stand-in has:
the no-LLM answers, clone's cross-workspace quirk, faults and the control endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from honcho import Honcho, Session
from honcho.http.exceptions import (
    AuthenticationError,
    ConnectionError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TimeoutError,
    UnprocessableEntityError,
)

import memhoncho.testing.standin as standin_module
from memhoncho.testing import HonchoStandIn, StandInControl
from memhoncho.testing.contract import SCENARIOS, Scenario, unique

#: seconds: the client's timeout in fault tests; its set-up calls (workspace, session, peer) run
#: under it too, so it leaves room for a machine loaded by the whole suite (0.3 s timed out there)
FAST_TIMEOUT_S = 1.0
FAULT_SLEEP_S = 2.0  # seconds a timeout fault holds the request (past FAST_TIMEOUT_S)


_clients: list[Honcho] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop()._http.close()


def sdk(standin: HonchoStandIn, workspace_id: str, api_key: str = "k", **options: object) -> Honcho:
    options.setdefault("max_retries", 0)
    client = Honcho(base_url=standin.url, api_key=api_key, workspace_id=workspace_id, **options)  # type: ignore[arg-type]
    _clients.append(client)
    return client


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_the_stand_in_keeps_the_contract(standin: HonchoStandIn, scenario: Scenario) -> None:
    scenario(standin.url, None)


def _session_where_ana_said_hi(standin: HonchoStandIn, workspace_id: str) -> Session:
    """Session ``s1`` after one SDK ``add_messages`` of ana's "hi"."""
    client = sdk(standin, workspace_id)
    session = client.session("s1")
    session.add_messages([client.peer("ana").message("hi")])
    return session


def test_the_module_says_it_is_a_test_double_and_not_honcho() -> None:
    doc = standin_module.__doc__ or ""
    assert "test double" in doc and "is not Honcho" in doc


def test_an_author_added_by_add_messages_is_stored_with_an_empty_config(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    _session_where_ana_said_hi(standin, workspace_id)
    assert standin.peer_config(workspace_id, "s1", "ana") == {}
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["hi"]


def test_nul_bytes_are_stripped_from_content(standin: HonchoStandIn, workspace_id: str) -> None:
    client = sdk(standin, workspace_id)
    stored = client.session("s1").add_messages([client.peer("ana").message("a\x00b")])
    assert stored[0].content == "ab"


def test_a_422_is_shaped_like_fastapi_and_its_message_is_a_list(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = sdk(standin, workspace_id)
    with pytest.raises(UnprocessableEntityError) as caught:
        client.session("s1").add_messages([client.peer("ana").message("x" * 25_001)])
    assert isinstance(caught.value.message, list)
    assert caught.value.message[0]["loc"] == ["body", "messages", 0, "content"]


def test_a_created_at_that_is_not_a_time_is_refused_422_and_nothing_is_stored(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = sdk(standin, workspace_id)
    client.session("s1").add_messages([client.peer("ana").message("kept")])
    url = f"{standin.url}/v3/workspaces/{workspace_id}/sessions/s1/messages"
    body = {"messages": [{"peer_id": "ana", "content": "hi", "created_at": "yesterday"}]}
    answer = httpx.post(url, json=body, headers={"Authorization": "Bearer k"})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "messages", 0, "created_at"]
    assert [m.content for m in client.session("s1").messages()] == ["kept"]


def test_chat_without_an_llm_answers_500_after_the_delay(workspace_id: str) -> None:
    with HonchoStandIn(llm=False, chat_delay_s=0.2) as standin:
        agent = sdk(standin, workspace_id).peer("agent")
        started = time.monotonic()
        with pytest.raises(ServerError) as caught:
            agent.chat("what does ana like?", target="ana")
        assert caught.value.status == 500
        assert time.monotonic() - started >= 0.2


def test_chat_stream_without_an_llm_is_an_empty_answer(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    agent = sdk(standin, workspace_id).peer("agent")
    stream = agent.chat_stream("what does ana like?", target="ana")
    assert "".join(stream) == ""


def test_chat_with_an_llm_answers_from_stored_conclusions(workspace_id: str) -> None:
    with HonchoStandIn(llm=True) as standin:
        client = sdk(standin, workspace_id)
        agent = client.peer("agent")
        agent.conclusions_of("ana").create([{"content": "Ana likes green tea"}])
        assert "Ana likes green tea" in (agent.chat("tea?", target="ana") or "")
        assert "Ana likes green tea" in "".join(agent.chat_stream("tea?", target="ana"))


def test_conclusions_without_embeddings_answer_422_openai_key_required(workspace_id: str) -> None:
    with HonchoStandIn(embeddings=False) as standin:
        agent = sdk(standin, workspace_id).peer("agent")
        with pytest.raises(UnprocessableEntityError) as caught:
            agent.conclusions_of("ana").create([{"content": "Ana likes tea"}])
        assert "OpenAI API key is required" in str(caught.value.message)
        assert standin.conclusions(workspace_id) == []


def test_representation_and_context_return_what_was_stored(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = sdk(standin, workspace_id)
    agent, ana = client.peer("agent"), client.peer("ana")
    session = client.session("s1")
    session.add_messages([ana.message("hello")])
    agent.conclusions_of("ana").create([{"content": "Ana is a gardener", "session_id": "s1"}])
    standin.set_summary(workspace_id, "s1", "Ana said hello.")
    assert agent.representation(target="ana") == "Ana is a gardener"
    context = session.context(peer_target="ana", peer_perspective="agent")
    assert context.summary is not None and context.summary.content == "Ana said hello."
    assert context.peer_representation == "Ana is a gardener"
    assert [c.content for c in agent.conclusions_of("ana").list()] == ["Ana is a gardener"]


def test_clone_of_a_session_named_alike_in_two_workspaces_answers_500(
    standin: HonchoStandIn,
) -> None:
    first, second = sdk(standin, unique("ws")), sdk(standin, unique("ws"))
    sessions = [first.session("shared"), second.session("shared")]
    stored = sessions[0].add_messages([first.peer("ana").message("hi")])
    sessions[1].add_messages([second.peer("ana").message("hello")])
    with pytest.raises(ServerError):
        sessions[0].clone(message_id=stored[0].id)


def test_a_deleted_session_id_stays_unusable(standin: HonchoStandIn, workspace_id: str) -> None:
    client = sdk(standin, workspace_id)
    client.session("s1").delete()
    with pytest.raises(NotFoundError):
        client.session("s1")


def test_an_api_key_when_configured_is_required(workspace_id: str) -> None:
    with HonchoStandIn(api_key="right") as standin:
        wrong = sdk(standin, workspace_id, api_key="wrong")
        with pytest.raises(AuthenticationError):
            wrong.session("s1")
        right = sdk(standin, workspace_id, api_key="right")
        assert right.session("s1").id == "s1"


def test_a_429_fault_carries_retry_after(standin: HonchoStandIn, workspace_id: str) -> None:
    standin.faults.add("http_429", path_contains="/sessions", retry_after_s=7)
    client = sdk(standin, workspace_id)
    with pytest.raises(RateLimitError) as caught:
        client.session("s1")
    assert caught.value.retry_after == 7.0
    assert client.session("s1").id == "s1"  # count=1: spent


def test_a_503_fault_fires_count_times_then_stops(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    fault = standin.faults.add("http_503", count=2, method="POST", path_contains="/peers")
    client = sdk(standin, workspace_id)
    for _ in range(2):
        with pytest.raises(ServerError) as caught:
            client.peer("ana")
        assert caught.value.status == 503
    assert client.peer("ana").id == "ana"
    assert fault.fired == 2 and standin.faults.list() == []


@pytest.mark.parametrize(
    ("kind", "stored"), [("timeout_after_commit", ["hello"]), ("timeout_before_commit", [])]
)
def test_a_timeout_after_commit_leaves_the_write_stored_and_one_before_commit_stores_nothing(
    standin: HonchoStandIn, workspace_id: str, kind: str, stored: list[str]
) -> None:
    client = sdk(standin, workspace_id, timeout=FAST_TIMEOUT_S)
    session, ana = client.session("s1"), client.peer("ana")
    standin.faults.add(kind, path_contains="/messages", sleep_s=FAULT_SLEEP_S)
    with pytest.raises(TimeoutError):
        session.add_messages([ana.message("hello")])
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == stored


@pytest.mark.parametrize(("after_commit", "stored"), [(False, 0), (True, 1)])
def test_a_dropped_connection_is_a_connection_error_before_or_after_commit(
    standin: HonchoStandIn, workspace_id: str, after_commit: bool, stored: int
) -> None:
    client = sdk(standin, workspace_id)
    session, ana = client.session("s1"), client.peer("ana")
    standin.faults.add("drop_connection", path_contains="/messages", after_commit=after_commit)
    with pytest.raises(ConnectionError):
        session.add_messages([ana.message("hello")])
    assert len(standin.messages(workspace_id, "s1")) == stored


def test_a_late_commit_times_the_client_out_then_stores_the_write(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = sdk(standin, workspace_id, timeout=FAST_TIMEOUT_S)
    session, ana = client.session("s1"), client.peer("ana")
    standin.faults.add("late_commit", path_contains="/messages", sleep_s=FAULT_SLEEP_S)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        session.add_messages([ana.message("hello")])
    assert standin.messages(workspace_id, "s1") == []  # the client gave up before the commit
    deadline = started + FAULT_SLEEP_S + 2.0
    while not standin.messages(workspace_id, "s1") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert time.monotonic() - started >= FAULT_SLEEP_S
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["hello"]


@pytest.mark.parametrize(
    ("kind", "error"),
    [("http_429", RateLimitError), ("http_500", ServerError), ("http_503", ServerError)],
)
def test_a_status_after_commit_answers_the_error_with_the_write_stored(
    standin: HonchoStandIn, workspace_id: str, kind: str, error: type[Exception]
) -> None:
    client = sdk(standin, workspace_id)
    session, ana = client.session("s1"), client.peer("ana")
    standin.faults.add(kind, path_contains="/messages", after_commit=True)
    with pytest.raises(error):
        session.add_messages([ana.message("hello")])
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["hello"]


def test_after_commit_is_refused_for_a_kind_it_does_not_apply_to(standin: HonchoStandIn) -> None:
    with pytest.raises(ValueError, match="after_commit"):
        standin.faults.add("timeout_before_commit", after_commit=True)


def test_latency_is_added_to_every_matching_request(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    standin.faults.add("latency_ms", count=None, latency_ms=100, path_contains="/peers")
    client = sdk(standin, workspace_id)
    started = time.monotonic()
    client.peer("ana")
    client.peer("bob")
    assert time.monotonic() - started >= 0.2
    assert len(standin.faults.list()) == 1  # count=None: still planned


def test_a_probabilistic_fault_with_a_seed_repeats() -> None:
    def pattern() -> list[bool]:
        with HonchoStandIn() as standin:
            standin.faults.add("http_500", count=None, probability=0.5, seed=42)
            client = sdk(standin, unique("ws"))
            outcomes = []
            for i in range(12):
                try:
                    client._http.post("/v3/workspaces", body={"id": f"w{i}"})
                    outcomes.append(True)
                except ServerError:
                    outcomes.append(False)
            return outcomes

    first = pattern()
    assert first == pattern() and True in first and False in first


def test_the_control_endpoints_drive_the_stand_in_from_another_process(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    control = StandInControl(standin.url)
    fault = control.add_fault("http_503", path_contains="/sessions", method="POST")
    assert fault["kind"] == "http_503"
    client = sdk(standin, workspace_id)
    with pytest.raises(ServerError):
        client.session("s1")
    client.session("s1").add_messages([client.peer("ana").message("hi")])
    assert [m["content"] for m in control.messages(workspace_id, "s1")] == ["hi"]
    assert control.request_count(path_contains="/messages", method="POST") == 1
    assert control.configure(llm=True)["llm"] is True and standin.llm is True
    control.reset()
    assert control.state()["workspaces"] == {} and standin.request_count() == 0


def test_request_count_narrows_by_path_and_method(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    session = _session_where_ana_said_hi(standin, workspace_id)
    list(session.messages())
    assert standin.request_count(path_contains="/messages") == 2
    assert standin.request_count(path_contains="/messages", method="POST") == 2
    assert standin.request_count(method="GET") == 0


def test_stopping_cuts_kept_alive_connections(workspace_id: str) -> None:
    standin = HonchoStandIn().start()
    client = sdk(standin, workspace_id, timeout=2.0)
    client.session("s1")
    standin.stop()
    with pytest.raises(ConnectionError):
        client.session("s1")


def test_message_count_counts_a_workspace_or_one_session_of_it(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = sdk(standin, workspace_id)
    ana = client.peer("ana")
    client.session("s1").add_messages([ana.message("one"), ana.message("two")])
    client.session("s2").add_messages([ana.message("three")])
    assert standin.message_count(workspace_id) == 3
    assert standin.message_count(workspace_id, "s2") == 1
    assert standin.message_count("ws-elsewhere") == 0
    assert [len(s["messages"]) for s in standin.sessions(workspace_id)] == [2, 1]
