"""The batch builder (pure): every run becomes a well-formed record, or a typed refusal."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memhoncho.capture.record import (
    ANSWER_JOINER,
    batch_id,
    build_record,
    is_selected,
    split_text,
)
from memhoncho.errors import InvalidEvent
from memhoncho.models import RunEvent, SelectionChange
from memhoncho.store.lines import decode_line, encode_line

EXAMPLES = settings(max_examples=1000, deadline=None)

texts = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.sampled_from(["a", " ", "\n", "é", "\ud800", "\x00", "✓"]), max_size=40),
)
entry_ids = st.integers(min_value=0, max_value=2**40)
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "tool_use", "text"])}),
)
outcomes = st.one_of(
    st.just({"status": "unanswered"}),
    st.fixed_dictionaries(
        {
            "status": st.just("answered"),
            "answer": st.fixed_dictionaries(
                {"entry_id": entry_ids, "content": st.lists(blocks, max_size=4)}
            ),
        }
    ),
)
events = st.fixed_dictionaries(
    {
        "conversation_id": st.text(min_size=1, max_size=20),
        "owner": st.one_of(st.none(), texts),
        "run_id": st.text(min_size=1, max_size=20),
        "inputs": st.lists(
            st.fixed_dictionaries({"entry_id": entry_ids, "text": texts}), max_size=5
        ),
        "outcome": outcomes,
    }
)
limits = st.sampled_from([1, 3, 7, 100, 25_000])


def _kept_chunks(text: str, limit: int) -> str:
    return "".join(
        chunk
        for chunk in (text[i : i + limit] for i in range(0, len(text), limit))
        if chunk.strip()
    )


def _build(raw: dict[str, Any], limit: int) -> dict[str, Any] | None:
    event = RunEvent.model_validate(raw)
    return build_record(event, user_peer_id="peer", max_message_length=limit, captured_at=1.0)


@EXAMPLES
@given(events, limits)
def test_every_run_is_built_into_a_well_formed_record_or_refused_with_a_typed_error(
    raw: dict[str, Any], limit: int
) -> None:
    try:
        record = _build(raw, limit)
    except InvalidEvent as exc:
        assert exc.code == "ERR_INVALID_EVENT"
        return
    answered = raw["outcome"]["status"] == "answered"
    sources: list[tuple[str, int, str]] = [
        ("user", i["entry_id"], i["text"]) for i in raw["inputs"]
    ]
    if answered:
        answer = raw["outcome"]["answer"]
        joined = ANSWER_JOINER.join(
            b["text"] for b in answer["content"] if b["type"] == "text" and b.get("text")
        )
        sources.append(("agent", answer["entry_id"], joined))
    expected = [(role, entry, _kept_chunks(text, limit)) for role, entry, text in sources]
    expected = [item for item in expected if item[2]]
    if record is None:
        assert expected == []
        return
    assert record["batch_id"] == batch_id(raw["conversation_id"], raw["run_id"])
    messages = record["messages"]
    # Order: user inputs in admission order, then the answer; each entry's parts in order.
    rebuilt: list[tuple[str, int, str]] = []
    for message in messages:
        key = (message["role"], message["entry_id"])
        if rebuilt and rebuilt[-1][:2] == key and message["meta"].get("part", 1) > 1:
            rebuilt[-1] = (*key, rebuilt[-1][2] + message["text"])
        else:
            rebuilt.append((*key, message["text"]))
    assert rebuilt == expected
    for index, message in enumerate(messages):
        assert message["id"] == f"{record['batch_id']}-{index}"
        assert 0 < len(message["text"]) <= limit and message["text"].strip()
        meta = message["meta"]
        assert meta["entry_id"] == message["entry_id"] and meta["run_id"] == raw["run_id"]
        assert meta.get("unanswered", False) == (not answered and message["role"] == "user")
        if "part" in meta:
            assert 1 <= meta["part"] <= meta["parts"] and meta["parts"] > 1
    assert decode_line(encode_line({**record, "seq": 1})[:-1]) == {**record, "seq": 1}


def test_a_long_text_is_split_into_numbered_parts_never_skipped() -> None:
    raw = {
        "conversation_id": "c",
        "owner": None,
        "run_id": "r",
        "inputs": [{"entry_id": 1, "text": "a" * 250}],
        "outcome": {"status": "unanswered"},
    }
    record = _build(raw, 100)
    assert record is not None
    parts = record["messages"]
    assert [len(m["text"]) for m in parts] == [100, 100, 50]
    assert [(m["meta"]["part"], m["meta"]["parts"]) for m in parts] == [(1, 3), (2, 3), (3, 3)]
    assert all(m["meta"]["unanswered"] is True for m in parts)


def test_an_answered_run_joins_its_text_blocks_after_the_user_inputs() -> None:
    raw = {
        "conversation_id": "c",
        "owner": None,
        "run_id": "r",
        "inputs": [
            {"entry_id": 1, "text": "q1"},
            {"entry_id": 2, "text": "  "},
            {"entry_id": 3, "text": "q2"},
        ],
        "outcome": {
            "status": "answered",
            "answer": {
                "entry_id": 4,
                "content": [
                    {"type": "text", "text": "a1"},
                    {"type": "tool_use", "name": "search"},
                    {"type": "text", "text": "a2"},
                ],
            },
        },
    }
    record = _build(raw, 25_000)
    assert record is not None
    assert [(m["role"], m["text"]) for m in record["messages"]] == [
        ("user", "q1"),
        ("user", "q2"),
        ("agent", "a1\n\na2"),
    ]
    assert all("unanswered" not in m["meta"] for m in record["messages"])


def test_a_run_with_only_empty_texts_is_empty() -> None:
    raw = {
        "conversation_id": "c",
        "owner": None,
        "run_id": "r",
        "inputs": [{"entry_id": 1, "text": ""}, {"entry_id": 2, "text": " \n "}],
        "outcome": {"status": "answered", "answer": {"entry_id": 3, "content": []}},
    }
    assert _build(raw, 100) is None


@pytest.mark.parametrize("field", ["run_id", "owner"])
def test_a_lone_surrogate_outside_the_texts_is_refused_not_a_crash(field: str) -> None:
    raw = {
        "conversation_id": "c",
        "run_id": "r",
        "owner": "o",
        "inputs": [{"entry_id": 1, "text": "hi"}],
        "outcome": {"status": "unanswered"},
        field: "bad\ud800",
    }
    with pytest.raises((InvalidEvent, ValidationError)):  # Host.capture maps both to InvalidEvent
        _build(raw, 100)


def test_the_batch_id_is_stable_and_distinguishes_runs_and_conversations() -> None:
    assert batch_id("c", "r") == batch_id("c", "r")
    assert len({batch_id("c", "r"), batch_id("c", "r2"), batch_id("c2", "r")}) == 3


@pytest.mark.parametrize(
    ("selection", "selected"),
    [
        (None, True),
        (["memhoncho"], True),
        (["other", "memhoncho"], True),
        ([], False),
        (["other"], False),
        (SelectionChange(add=["x"], remove=["memhoncho"]), True),
        (SelectionChange(), True),
    ],
)
def test_the_array_form_selects_exactly_its_members_and_the_object_form_never_excludes(
    selection: list[str] | SelectionChange | None, selected: bool
) -> None:
    assert is_selected(selection) is selected


@EXAMPLES
@given(st.text(max_size=80), st.integers(min_value=1, max_value=30))
def test_split_text_keeps_every_non_blank_chunk_within_the_limit(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert "".join(parts) == _kept_chunks(text, limit)
    assert all(0 < len(p) <= limit and p.strip() for p in parts)


def test_the_run_model_refuses_coercion_and_unknown_keys() -> None:
    base = {
        "conversation_id": "c",
        "owner": None,
        "run_id": "r",
        "outcome": {"status": "unanswered"},
    }
    RunEvent.model_validate(base)
    for bad in (
        {**base, "inputs": [{"entry_id": "1", "text": "x"}]},
        {**base, "inputs": [{"entry_id": True, "text": "x"}]},
        {**base, "inputs": [{"entry_id": -1, "text": "x"}]},
        {**base, "surprise": 1},
        {**base, "run_id": ""},
        {**base, "outcome": {"status": "maybe"}},
    ):
        with pytest.raises(ValidationError):
            RunEvent.model_validate(bad)
