"""One deadline for a whole request (``honcho/deadline.py``), through the real SDK.

The stand-in's ``trickle`` fault stores the request, then sends its answer's body in parts
with the whole spread over ``sleep_s``: no gap reaches the client's read timeout, the whole
far exceeds it. httpx's per-phase timeout lets such an answer run on; the deadline ends it.
"""

from __future__ import annotations

import time

import pytest
from honcho import Honcho
from honcho.session import Session

from memhoncho.errors import HonchoTimeout, HonchoUnreachable
from memhoncho.honcho import adapter
from memhoncho.honcho.adapter import HonchoTarget, OutgoingMessage
from memhoncho.testing import HonchoStandIn

TIMEOUT_S = 1.0  # seconds: the client's timeout, for the whole request
TRICKLE_S = 4.0  # seconds the stand-in takes to send a trickled answer: 4 timeouts


def _trickle_the_next_send(standin: HonchoStandIn) -> None:
    standin.faults.add("trickle", method="POST", path_endswith="/messages", sleep_s=TRICKLE_S)


def test_a_trickled_answer_outlives_the_sdks_own_per_phase_timeout(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    """The fault is real: the SDK's own client waits the whole trickle and succeeds."""
    client = Honcho(base_url=standin.url, api_key="k", workspace_id=workspace_id, timeout=TIMEOUT_S)
    client.session("s1")
    _trickle_the_next_send(standin)
    started = time.monotonic()
    stored = Session("s1", client).add_messages([client.peer("ana").message("hello")])
    assert len(stored) == 1
    assert time.monotonic() - started >= TRICKLE_S * 0.9


def test_a_trickled_answer_ends_at_the_requests_deadline_as_a_send_that_may_have_landed(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = adapter.write_client(HonchoTarget(standin.url, "k", workspace_id, TIMEOUT_S))
    adapter.ensure_session(client, "s1", "ana", "agent")
    _trickle_the_next_send(standin)
    started = time.monotonic()
    with pytest.raises(HonchoTimeout) as caught:
        adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
    assert time.monotonic() - started < TRICKLE_S / 2  # the deadline, not the trickle
    decision = adapter.classify(caught.value, 1)
    assert decision.unclear and not decision.never_sent  # it was stored: the fence holds
    assert len(standin.messages(workspace_id, "s1")) == 1


def test_send_by_ends_a_request_sooner_than_its_timeout(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = adapter.write_client(HonchoTarget(standin.url, "k", workspace_id, TRICKLE_S * 3))
    adapter.ensure_session(client, "s1", "ana", "agent")
    _trickle_the_next_send(standin)
    started = time.monotonic()
    with pytest.raises(HonchoTimeout), adapter.send_by(time.time() + TIMEOUT_S):
        adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
    assert time.monotonic() - started < TRICKLE_S / 2


def test_a_request_past_its_send_by_is_never_sent(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = adapter.write_client(HonchoTarget(standin.url, "k", workspace_id, TIMEOUT_S))
    adapter.ensure_session(client, "s1", "ana", "agent")
    adapter.close_clients()  # no pooled connection: the request must connect first
    client = adapter.write_client(HonchoTarget(standin.url, "k", workspace_id, TIMEOUT_S))
    before = standin.request_count()
    with pytest.raises(HonchoUnreachable), adapter.send_by(time.time() - 1.0):
        adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
    assert standin.request_count() == before


def test_a_refused_connection_is_a_request_that_never_reached_honcho(
    standin: HonchoStandIn, workspace_id: str
) -> None:
    client = adapter.write_client(HonchoTarget(standin.url, "k", workspace_id, TIMEOUT_S))
    adapter.ensure_session(client, "s1", "ana", "agent")
    standin.stop()
    try:
        with pytest.raises(HonchoUnreachable) as caught:
            adapter.add_messages(client, "s1", [OutgoingMessage("ana", "hello")])
        assert adapter.never_sent(caught.value) and adapter.proves_nothing_stored(caught.value)
        assert caught.value.details["transport_error"] == "ConnectError"
    finally:
        standin.start()  # the same port: the client reaches it again
    assert adapter.add_messages(client, "s1", [OutgoingMessage("ana", "again")])
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["again"]


def test_the_environments_proxy_carries_the_clients_requests(
    standin: HonchoStandIn, workspace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport of one's own turns httpx's proxy lookup off; the clients do it instead."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", standin.url)
    monkeypatch.setenv("http_proxy", standin.url)
    unreachable = "http://honcho.invalid"  # reachable only through the proxy
    assert adapter.environment_proxy(unreachable) == standin.url
    client = adapter.write_client(HonchoTarget(unreachable, "k", workspace_id, TIMEOUT_S))
    adapter.ensure_session(client, "s1", "ana", "agent")
    assert adapter.add_messages(client, "s1", [OutgoingMessage("ana", "via the proxy")])
    assert [m["content"] for m in standin.messages(workspace_id, "s1")] == ["via the proxy"]
    monkeypatch.setenv("NO_PROXY", "honcho.invalid")
    monkeypatch.setenv("no_proxy", "honcho.invalid")
    assert adapter.environment_proxy(unreachable) is None
