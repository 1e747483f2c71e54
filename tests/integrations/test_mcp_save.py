"""The save tool's parts: whose conversation a name means, the run a turn becomes, and the run
id a turn without one gets (a retry of the latest save is stored once, words said again later
are kept), in the outbox and after delivery compacted it away."""

from __future__ import annotations

from typing import Any

import pytest

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.errors import InvalidId, InvalidToolCall
from memhoncho.integrations.mcp import save, scope, turn_ids
from memhoncho.models import Ledger, RunEvent
from memhoncho.recall.arguments import parse_arguments


def test_two_owners_conversations_of_one_name_are_never_one_conversation() -> None:
    pairs = [
        ("a", "b:c"),
        ("a:b", "c"),
        ("a-b", "c"),
        ("a", "b-c"),
        (None, "work"),
        ("user", "work"),
    ]
    stored = [scope.scoped(owner, conversation) for owner, conversation in pairs]
    assert len(set(stored)) == len(pairs)
    assert len({ids.conversation_key(s) for s in stored}) == len(pairs)
    for (owner, conversation), name in zip(pairs, stored, strict=True):
        assert scope.unscoped(owner, name) == conversation
    assert scope.unscoped("bo", scope.scoped("ana", "work")) == scope.scoped("ana", "work")


def test_a_long_owner_is_tagged_by_a_digest_and_every_stored_id_maps() -> None:
    long_owner = "ü" * 256  # the longest user name, its peer id hashed
    tag = scope.owner_tag(long_owner)
    assert tag.startswith("~") and len(tag) <= scope.MAX_TAG_CHARS + 1
    assert scope.owner_tag("x" * 255) != scope.owner_tag("x" * 256)
    stored = scope.scoped(long_owner, "c" * scope.MAX_CONVERSATION_CHARS)
    assert len(stored) <= ids.MAX_INPUT_LEN
    ids.conversation_key(stored)


#: names that look like another, or act on a terminal: bidi overrides and isolates, zero-width
#: space, joiner and non-joiner, a byte-order mark, an ANSI escape, a NUL
DECEPTIVE = [
    "admin\u202egpj.exe",
    "work\u2066x\u2069",
    "wo\u200brk",
    "wo\u200drk",
    "wo\u200crk",
    "\ufeffwork",
    "\x1b[31mwork\x1b[0m",
    "a\x00b",
]


@pytest.mark.parametrize(
    "conversation", ["", " x", "x ", "c" * (scope.MAX_CONVERSATION_CHARS + 1), 7, None, *DECEPTIVE]
)
def test_a_bad_conversation_id_is_refused(conversation: object) -> None:
    with pytest.raises(InvalidId):
        scope.scoped("ana", conversation)


@pytest.mark.parametrize("owner", ["", " ana", "ana\n", "x" * (ids.MAX_INPUT_LEN + 1), *DECEPTIVE])
def test_an_owner_is_refused_as_a_conversation_id_is(owner: str) -> None:
    with pytest.raises(InvalidId):
        scope.check_owner(owner)


def test_owners_and_ids_of_every_script_are_taken() -> None:
    for name in ("ana@example.com", "José", "مريم", "山田", "c" * scope.MAX_CONVERSATION_CHARS):
        assert scope.check_owner(name) == name
        scope.scoped(name, name)
    assert scope.check_owner(None) is None


def test_a_turn_becomes_one_run_in_its_order_with_a_run_id_of_its_content() -> None:
    args = parse_arguments(
        save.SAVE,
        save.SaveArguments,
        {
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "user", "content": "second"},
                {"role": "assistant", "content": "one"},
                {"role": "assistant", "content": "two"},
            ]
        },
    )
    turn = save.turn_of(args)
    event = RunEvent.model_validate(save.run_event("ana", "ana:work", "r", turn))
    assert [(i.entry_id, i.text) for i in event.inputs] == [(0, "first"), (1, "second")]
    assert event.outcome.status == "answered"
    assert [b.text for b in event.outcome.answer.content] == ["one", "two"]  # type: ignore[union-attr]
    assert turn_ids.turn_digest(turn) == turn_ids.turn_digest(list(turn))
    assert turn_ids.turn_digest(turn) != turn_ids.turn_digest(turn[:-1])
    assert turn_ids.turn_digest([("user", "a\x00b")]) != turn_ids.turn_digest([("user\x00a", "b")])
    alone = save.turn_of(parse_arguments(save.SAVE, save.SaveArguments, {"user": "hi"}))
    unanswered = RunEvent.model_validate(save.run_event(None, "user:x", "r", alone))
    assert unanswered.outcome.status == "unanswered"


def test_a_turn_must_be_the_users_words_then_the_answer() -> None:
    for arguments in (
        {},
        {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]},
        {"user": "u", "messages": [{"role": "user", "content": "u"}]},
    ):
        args = parse_arguments(save.SAVE, save.SaveArguments, arguments)
        with pytest.raises(InvalidToolCall):
            save.turn_of(args)


@pytest.fixture
def settings(store_url: str | None) -> dict[str, Any]:
    return {}  # no Honcho: these saves stay in the outbox (of each store, store_url)


YES = {"user": "yes", "assistant": "Done."}


def _save(host: Host, arguments: dict[str, Any]) -> dict[str, Any]:
    return save.save(host, "ana", "chat", arguments)


def _texts(host: Host) -> list[list[str]]:
    key = ids.conversation_key(scope.scoped("ana", "chat"))
    stored = host.deployment.store().records(key)
    return [[m["text"] for m in r.get("messages", [])] for r in stored if not r.get("mark")]


def test_words_said_again_after_other_turns_are_kept_and_a_retry_is_stored_once(
    host: Host,
) -> None:
    first = _save(host, YES)
    retried = _save(host, YES)  # the client lost the answer and calls again
    _save(host, {"user": "book the 9:40 to Porto", "assistant": "Which class?"})
    again = _save(host, YES)  # "yes" said again, turns apart
    again_retried = _save(host, YES)
    assert (first["status"], retried["status"]) == ("captured", "duplicate")
    assert retried["run_id"] == first["run_id"]
    assert (again["status"], again_retried["status"]) == ("captured", "duplicate")
    assert again["run_id"] != first["run_id"]
    assert _texts(host) == [
        ["yes", "Done."],
        ["book the 9:40 to Porto", "Which class?"],
        ["yes", "Done."],
    ]
    other = _save(host, {"user": "yes"})  # not the latest save's turn: a new turn
    assert other["status"] == "captured"
    given = _save(host, {**YES, "run_id": "m-7"})  # a client's run id is its own identity
    assert given["status"] == "captured" and given["run_id"] == "m-7"
    assert _save(host, YES)["status"] == "captured"  # after a client's run id: a new turn


def test_a_retry_after_delivery_compacted_the_outbox_is_still_stored_once(host: Host) -> None:
    store = host.deployment.store()
    stored = scope.scoped("ana", "chat")
    key = ids.conversation_key(stored)

    def delivered_and_compacted() -> None:
        """What a worker and the sweep leave: the ledger holds the batches, the outbox a mark."""
        records = [r for r in store.records(key) if not r.get("mark")]
        ledger = store.read_ledger(key) or Ledger(conversation_id=stored)
        batches = [*ledger.delivered_batches, *(str(r["batch_id"]) for r in records)]
        delivered = ledger.model_copy(
            update={"delivered_seq": records[-1]["seq"], "delivered_batches": batches}
        )
        store.write_ledger(key, delivered)
        store.rewrite(key, lambda record: False)
        assert _texts(host) == []

    first = _save(host, YES)
    delivered_and_compacted()
    again = _save(host, YES)
    assert again == {**first, "status": "duplicate", "hint": None, "about": again["about"]}
    _save(host, {"user": "and a return on Sunday", "assistant": "Done."})
    delivered_and_compacted()
    again = _save(host, YES)  # said again after another turn: kept
    assert again["status"] == "captured" and again["run_id"] != first["run_id"]
    delivered_and_compacted()
    assert _save(host, YES)["status"] == "duplicate"  # its retry, once delivered
