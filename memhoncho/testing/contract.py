"""Honcho wire contract: the HONCHO.md facts memhoncho depends on, as runnable scenarios.

Each scenario takes a Honcho base URL (and key), works in a fresh workspace with fresh
session ids, and asserts with the real SDK only, so the same function runs against the
stand-in (every test run) and against a real Honcho (``tests/test_live_contract.py``).
Like ``memhoncho.honcho.adapter``, this module talks to the SDK directly: pinning the wire
is its job.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta, timezone

import pydantic
from honcho import Honcho, Peer, Session
from honcho.api_types import (
    DreamConfiguration,
    SessionConfiguration,
    SessionPeerConfig,
    SummaryConfiguration,
)
from honcho.http import routes
from honcho.http.exceptions import NotFoundError, UnprocessableEntityError

from memhoncho.honcho import adapter

Scenario = Callable[[str, str | None], None]
CONTRACT_TIMEOUT_S = 20.0  # seconds per request; a live server can be slow
OUTBOX_KEY = "memhoncho_outbox_id"


def unique(prefix: str) -> str:
    """An id no other run uses: sessions must be unique across workspaces (clone)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


_opened: ContextVar[list[Honcho] | None] = ContextVar("contract_clients", default=None)


def client_for(base_url: str, api_key: str | None, workspace_id: str | None = None) -> Honcho:
    """A fresh SDK client in a fresh workspace; closed when its scenario ends."""
    client = Honcho(
        base_url=base_url,
        api_key=api_key or "standin-key",
        workspace_id=workspace_id or unique("mhws"),
        timeout=CONTRACT_TIMEOUT_S,
        max_retries=0,
    )
    opened = _opened.get()
    if opened is not None:
        opened.append(client)
    return client


def _greeted_session(client: Honcho) -> tuple[Peer, Session]:
    """A fresh user and a fresh session holding one message of theirs ("hello")."""
    user = client.peer(unique("user"))
    session = client.session(unique("sess"))
    session.add_messages([user.message("hello")])
    return user, session


def scenario(fn: Scenario) -> Scenario:
    """Mark a contract scenario: its clients are closed after it, pass or fail."""

    @functools.wraps(fn)
    def run(base_url: str, api_key: str | None = None) -> None:
        opened: list[Honcho] = []
        token = _opened.set(opened)
        try:
            fn(base_url, api_key)
        finally:
            _opened.reset(token)
            for client in opened:
                client._http.close()

    return run


def _raises_422(call: Callable[[], object]) -> UnprocessableEntityError:
    try:
        call()
    except UnprocessableEntityError as exc:
        return exc
    raise AssertionError("expected Honcho to answer 422")


# ----------------------------------------------------------------- scenarios


@scenario
def limits_answer_422(base_url: str, api_key: str | None) -> None:
    """Past each documented limit, Honcho answers 422 and stores nothing."""
    client = client_for(base_url, api_key)
    user = client.peer(unique("user"))
    session = client.session(unique("sess"))
    _raises_422(lambda: session.add_messages([user.message(f"m{i}") for i in range(101)]))
    _raises_422(lambda: session.add_messages([user.message("x" * 25_001)]))
    _raises_422(lambda: client.session("conversation.with:dots"))
    _raises_422(lambda: client.peer("ana@example.com"))
    _raises_422(lambda: client.session(unique("sess"), metadata={f"k{i}": i for i in range(101)}))
    _raises_422(lambda: session.messages(size=101))
    _raises_422(
        lambda: client._http.post(
            routes.peer_search(client.workspace_id, user.id), body={"query": "m", "limit": 101}
        )
    )
    assert list(session.messages()) == []
    stored = session.add_messages([user.message("x" * 25_000)])
    assert len(stored) == 1 and len(stored[0].content) == 25_000


@scenario
def sdk_refuses_before_sending(base_url: str, api_key: str | None) -> None:
    """Some refusals never reach Honcho: the SDK's own pydantic checks."""
    client = client_for(base_url, api_key)
    user = client.peer(unique("user"))
    for call in (
        lambda: user.message("   "),
        lambda: user.search("q", limit=101),
    ):
        try:
            call()
        except (pydantic.ValidationError, ValueError):
            continue
        raise AssertionError("expected the SDK to refuse before sending")


@scenario
def get_or_create_keeps_one_session(base_url: str, api_key: str | None) -> None:
    """Asking for a session twice gets the same one; given metadata replaces the old."""
    client = client_for(base_url, api_key)
    sid = unique("sess")
    first = client.session(sid, metadata={"a": 1})
    second = client.session(sid, metadata={"b": 2})
    assert first.id == second.id == sid
    assert second.get_metadata() == {"b": 2}
    assert [s.id for s in client.sessions()].count(sid) == 1


@scenario
def peer_config_is_sticky(base_url: str, api_key: str | None) -> None:
    """An author auto-added by add_messages keeps its empty config; only set_peer_... changes it."""
    client = client_for(base_url, api_key)
    user, session = _greeted_session(client)
    session.add_peers([(user.id, SessionPeerConfig(observe_me=False, observe_others=True))])
    assert session.get_peer_configuration(user.id).observe_others is not True
    session.set_peer_configuration(user.id, SessionPeerConfig(observe_others=True))
    assert session.get_peer_configuration(user.id).observe_others is True


@scenario
def peers_given_at_creation_keep_their_config(base_url: str, api_key: str | None) -> None:
    """Creating the session with peers=[...] before any message sets their config."""
    client = client_for(base_url, api_key)
    user, agent = unique("user"), unique("agent")
    session = client.session(
        unique("sess"),
        peers=[
            (user, SessionPeerConfig(observe_me=True, observe_others=False)),
            (agent, SessionPeerConfig(observe_me=False, observe_others=True)),
        ],
    )
    session.add_messages([client.peer(user).message("hi"), client.peer(agent).message("hello")])
    assert session.get_peer_configuration(agent).observe_others is True
    assert session.get_peer_configuration(agent).observe_me is False
    assert {p.id for p in session.peers()} == {user, agent}


@scenario
def order_is_insertion_order(base_url: str, api_key: str | None) -> None:
    """Messages list in the order they were added, whatever their created_at; it is kept."""
    client = client_for(base_url, api_key)
    user = client.peer(unique("user"))
    session = client.session(unique("sess"))
    base = datetime(2021, 6, 1, tzinfo=UTC)
    stamps = [base + timedelta(days=3 - i) for i in range(4)]  # newest first
    for i, stamp in enumerate(stamps):
        session.add_messages([user.message(f"turn {i}", created_at=stamp)])
    listed = list(session.messages())
    assert [m.content for m in listed] == [f"turn {i}" for i in range(4)]
    assert [m.created_at for m in listed] == stamps


@scenario
def created_at_is_kept_as_the_same_instant(base_url: str, api_key: str | None) -> None:
    """A given created_at is kept as the same instant (any offset, microseconds, naive read as
    UTC) and answered in UTC; the SDK refuses one that is not ISO 8601 before sending."""
    client = client_for(base_url, api_key)
    user, session = client.peer(unique("user")), client.session(unique("sess"))
    east = datetime(2019, 3, 4, 5, 6, 7, 123456, tzinfo=timezone(timedelta(hours=9)))
    sent: list[str | datetime] = [east, "2020-02-29T23:59:59Z", "2021-07-01T12:00:00"]
    session.add_messages([user.message(f"at {i}", created_at=w) for i, w in enumerate(sent)])
    listed = list(session.messages())
    assert [(m.created_at, m.created_at.utcoffset()) for m in listed] == [
        (datetime(2019, 3, 3, 20, 6, 7, 123456, tzinfo=UTC), timedelta(0)),
        (datetime(2020, 2, 29, 23, 59, 59, tzinfo=UTC), timedelta(0)),
        (datetime(2021, 7, 1, 12, 0, tzinfo=UTC), timedelta(0)),
    ]
    with contextlib.suppress(ValueError):
        session.add_messages([user.message("bad", created_at="yesterday")])
        raise AssertionError("the SDK sent a created_at that is not a time")
    assert len(list(session.messages())) == 3


@scenario
def add_messages_answers_in_request_order(base_url: str, api_key: str | None) -> None:
    """One add_messages returns one Message per input, in request order, with ids."""
    client = client_for(base_url, api_key)
    user, agent = client.peer(unique("user")), client.peer(unique("agent"))
    session = client.session(unique("sess"))
    sent = [user.message("one", metadata={"n": 1}), agent.message("two"), user.message("three")]
    stored = session.add_messages(sent)
    assert [m.content for m in stored] == ["one", "two", "three"]
    assert [m.peer_id for m in stored] == [user.id, agent.id, user.id]
    assert len({m.id for m in stored}) == 3
    assert stored[0].metadata == {"n": 1} and stored[0].session_id == session.id


@scenario
def metadata_in_filter_finds_exactly_those(base_url: str, api_key: str | None) -> None:
    """{"metadata": {key: {"in": [...]}}} returns just the messages holding those values."""
    client = client_for(base_url, api_key)
    user = client.peer(unique("user"))
    session = client.session(unique("sess"))
    session.add_messages([user.message(f"m{i}", metadata={OUTBOX_KEY: f"ob{i}"}) for i in range(6)])
    page = session.messages(filters={"metadata": {OUTBOX_KEY: {"in": ["ob1", "ob4", "nope"]}}})
    assert [m.content for m in page] == ["m1", "m4"]
    assert page.total == 2


@scenario
def clone_copies_up_to_the_cutoff(base_url: str, api_key: str | None) -> None:
    """Clone: metadata, config, peers with configs, messages to the cutoff; new ids, reset."""
    client = client_for(base_url, api_key)
    user, agent = unique("user"), unique("agent")
    config = SessionConfiguration(
        summary=SummaryConfiguration(enabled=True), dream=DreamConfiguration(enabled=True)
    )
    session = client.session(
        unique("sess"),
        metadata={"origin": "parent"},
        configuration=config,
        peers=[(agent, SessionPeerConfig(observe_me=False, observe_others=True))],
    )
    old = datetime(2020, 1, 1, tzinfo=UTC)
    stored = session.add_messages(
        [client.peer(user).message(f"m{i}", metadata={"i": i}, created_at=old) for i in range(4)]
    )
    clone = session.clone(message_id=stored[1].id)
    assert clone.id != session.id
    copied = list(clone.messages())
    assert [m.content for m in copied] == ["m0", "m1"]
    assert [m.metadata for m in copied] == [{"i": 0}, {"i": 1}]
    assert not {m.id for m in copied} & {m.id for m in stored}
    assert all(m.token_count == 0 for m in copied)
    assert all(m.created_at != old for m in copied)
    assert clone.get_metadata() == {"origin": "parent"}
    assert clone.get_configuration().summary is not None
    assert clone.get_peer_configuration(agent).observe_others is True


@scenario
def clone_refuses_an_unknown_cutoff(base_url: str, api_key: str | None) -> None:
    """An unknown message_id answers 404 and makes no session."""
    client = client_for(base_url, api_key)
    user, session = _greeted_session(client)
    try:
        session.clone(message_id="no_such_message_id")
    except NotFoundError:
        pass
    else:
        raise AssertionError("expected 404 for an unknown clone cutoff")
    assert [s.id for s in client.sessions()] == [session.id]


@scenario
def clone_of_an_empty_session_is_a_phantom(base_url: str, api_key: str | None) -> None:
    """Cloning an empty session answers with an id that was never saved."""
    client = client_for(base_url, api_key)
    session = client.session(unique("sess"))
    phantom = session.clone()
    assert phantom.id != session.id
    assert phantom.id not in [s.id for s in client.sessions()]


@scenario
def search_is_author_scoped(base_url: str, api_key: str | None) -> None:
    """peer.search finds only that peer's messages, case-insensitively, within the limit."""
    client = client_for(base_url, api_key)
    user, agent = client.peer(unique("user")), client.peer(unique("agent"))
    session = client.session(unique("sess"))
    session.add_messages(
        [
            user.message("I grow pineapples on the balcony"),
            agent.message("Pineapples need warmth"),
            user.message("my pineapple plant flowered"),
            user.message("nothing relevant here"),
        ]
    )
    found = user.search("PINEAPPLE", limit=10)
    assert {m.peer_id for m in found} == {user.id}
    assert len(found) == 2
    assert len(user.search("pineapple", limit=1)) == 1


@scenario
def representation_is_a_string(base_url: str, api_key: str | None) -> None:
    """representation() is a str, "" where nothing was derived."""
    client = client_for(base_url, api_key)
    agent, user = client.peer(unique("agent")), client.peer(unique("user"))
    assert agent.representation(target=user.id) == ""


@scenario
def session_context_has_the_messages(base_url: str, api_key: str | None) -> None:
    """Session context returns the messages (within tokens) and no summary yet."""
    client = client_for(base_url, api_key)
    user, agent = client.peer(unique("user")), client.peer(unique("agent"))
    session = client.session(unique("sess"))
    session.add_messages([user.message("hello there"), agent.message("hi, how can I help")])
    context = session.context(tokens=2000, peer_target=user.id, peer_perspective=agent.id)
    assert [m.content for m in context.messages] == ["hello there", "hi, how can I help"]
    assert context.summary is None
    assert not context.peer_representation


@scenario
def adapter_sets_config_before_the_first_message(base_url: str, api_key: str | None) -> None:
    """adapter.ensure_session leaves both members configured, even after the fact: one
    request where get-or-create answers 201 (created, members with their config), three
    where it answers 200 (found: each config set again)."""
    target = adapter.HonchoTarget(base_url, api_key or "k", unique("mhws"), CONTRACT_TIMEOUT_S)
    client = adapter.write_client(target)
    sid, user, agent = unique("sess"), unique("user"), unique("agent")
    # 1 request where create answers 201 (the stand-in), 3 where 200 (3.0.12 not confirmed)
    assert adapter.ensure_session(client, sid, user, agent, {"conversation": "c1"}) in (1, 3)
    adapter.add_messages(
        client,
        sid,
        [adapter.OutgoingMessage(user, "hello"), adapter.OutgoingMessage(agent, "hi")],
    )
    session = client.session(sid)
    assert session.get_peer_configuration(user).observe_me is True
    assert session.get_peer_configuration(agent).observe_others is True
    # Sticky config: a session whose members were auto-added is repaired by a second call.
    late = unique("sess")
    client.session(late).add_messages([client.peer(agent).message("first")])
    assert adapter.ensure_session(client, late, user, agent, None) == 3
    assert client.session(late).get_peer_configuration(agent).observe_others is True


@scenario
def adapter_finds_outbox_ids_across_pages(base_url: str, api_key: str | None) -> None:
    """find_outbox_ids pages through everything: 150 stored, 130 asked, 120 found."""
    client = client_for(base_url, api_key)
    sid, user = unique("sess"), unique("user")
    adapter.ensure_session(client, sid, user, unique("agent"), None)
    ids: list[str] = []
    for start in (0, 100):
        batch = [
            adapter.OutgoingMessage(user, f"m{i}", {OUTBOX_KEY: f"ob{i}"})
            for i in range(start, min(start + 100, 150))
        ]
        ids += adapter.add_messages(client, sid, batch)
    asked = [f"ob{i}" for i in range(30, 150)] + [f"missing{i}" for i in range(10)]
    found = adapter.find_outbox_ids(client, sid, OUTBOX_KEY, asked)
    assert found == {f"ob{i}": ids[i] for i in range(30, 150)}
    assert [m["content"] for m in adapter.list_messages(client, sid)] == [
        f"m{i}" for i in range(150)
    ]


SCENARIOS: dict[str, Scenario] = {
    fn.__name__: fn
    for fn in (
        limits_answer_422,
        sdk_refuses_before_sending,
        get_or_create_keeps_one_session,
        peer_config_is_sticky,
        peers_given_at_creation_keep_their_config,
        order_is_insertion_order,
        created_at_is_kept_as_the_same_instant,
        add_messages_answers_in_request_order,
        metadata_in_filter_finds_exactly_those,
        clone_copies_up_to_the_cutoff,
        clone_refuses_an_unknown_cutoff,
        clone_of_an_empty_session_is_a_phantom,
        search_is_author_scoped,
        representation_is_a_string,
        session_context_has_the_messages,
        adapter_sets_config_before_the_first_message,
        adapter_finds_outbox_ids_across_pages,
    )
}
