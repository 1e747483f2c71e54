"""The save tool's pure parts: whose conversation a name means, the run a turn becomes, and
the run id a turn without one gets."""

from __future__ import annotations

import pytest

from memhoncho import ids
from memhoncho.errors import InvalidId, InvalidToolCall
from memhoncho.integrations.mcp import save, scope
from memhoncho.models import RunEvent
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


@pytest.mark.parametrize("conversation", ["", " x", "x ", "a\x00b", "c" * 129, 7, None])
def test_a_bad_conversation_id_is_refused(conversation: object) -> None:
    with pytest.raises(InvalidId):
        scope.scoped("ana", conversation)


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
    assert save.derived_run_id(turn) == save.derived_run_id(list(turn))
    assert save.derived_run_id(turn) != save.derived_run_id(turn[:-1])
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
