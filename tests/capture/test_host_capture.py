"""Host.capture: durable before it returns, refused without a trace, never slowed by a broker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from host_capture_support import (
    CONTENT,
    records,
    run_event,
    snapshot,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memhoncho import Host, ids
from memhoncho.capture.record import batch_id
from memhoncho.errors import (
    CaptureTooLarge,
    InvalidEvent,
    InvalidId,
    OutboxCapacity,
    RunConflict,
)
from memhoncho.models import Ledger
from memhoncho.store.layout import Layout
from memhoncho.store.ledger import write_ledger
from memhoncho.store.outbox import Outbox
from memhoncho.testing.config import write_settings

# ---- statuses ----------------------------------------------------------------------------


def test_a_settled_run_is_on_disk_when_capture_returns(host: Host, data_dir: Path) -> None:
    result = host.capture(run_event())
    assert result.status == "captured"
    assert result.batch_id == batch_id("c-42", "r-1")
    assert result.enqueued is False  # no API key: nothing is published
    [record] = records(data_dir)
    assert record["batch_id"] == result.batch_id
    assert record["user_peer_id"] == ids.peer_id("ana@example.com")
    assert [m["role"] for m in record["messages"]] == ["user", "agent"]


def test_capturing_the_same_run_twice_is_a_duplicate_and_writes_nothing(
    host: Host, data_dir: Path, config_dir: Path
) -> None:
    host.capture(run_event())
    before = snapshot(data_dir)
    again = host.capture(run_event())
    assert again.status == "duplicate" and again.batch_id == batch_id("c-42", "r-1")
    with Host(config_dir=config_dir, data_dir=data_dir) as other:  # another host process
        assert other.capture(run_event()).status == "duplicate"
    assert snapshot(data_dir) == before


def test_a_run_delivered_and_compacted_away_is_still_a_duplicate(
    host: Host, data_dir: Path
) -> None:
    first = host.capture(run_event())
    layout = Layout(data_dir)
    key = ids.conversation_key("c-42")
    [record] = records(data_dir)
    write_ledger(
        layout,
        key,
        Ledger(
            conversation_id="c-42",
            delivered_seq=record["seq"],
            delivered_batches=[str(first.batch_id)],
        ),
    )
    Outbox(layout).rewrite(key, keep=lambda r: False)
    assert records(data_dir) == []
    before = snapshot(data_dir)
    assert host.capture(run_event()).status == "duplicate"
    assert snapshot(data_dir) == before


@pytest.mark.parametrize("selection", [[], ["other-memory"], ["Memhoncho"]])
def test_a_selection_array_without_memhoncho_is_not_selected(
    host: Host, data_dir: Path, selection: list[str]
) -> None:
    assert host.capture(run_event(selection=selection)).status == "not-selected"
    assert snapshot(data_dir) == {}


@pytest.mark.parametrize(
    "selection", [None, ["memhoncho"], {"add": [], "remove": ["memhoncho"]}, {"add": ["x"]}]
)
def test_the_object_form_never_excludes_memhoncho(host: Host, selection: object) -> None:
    assert host.capture(run_event(selection=selection)).status == "captured"


def test_a_run_with_nothing_to_deliver_is_empty(host: Host, data_dir: Path) -> None:
    event = run_event(
        inputs=[{"entry_id": 1, "text": "   "}],
        outcome={"status": "answered", "answer": {"entry_id": 2, "content": [{"type": "image"}]}},
    )
    assert host.capture(event).status == "empty"
    assert host.capture(run_event(inputs=[], outcome={"status": "unanswered"})).status == "empty"
    assert snapshot(data_dir) == {}


def test_an_unanswered_run_tags_its_inputs_and_carries_no_agent_entry(
    host: Host, data_dir: Path
) -> None:
    host.capture(run_event(outcome={"status": "unanswered"}))
    [record] = records(data_dir)
    assert [(m["role"], m["meta"].get("unanswered")) for m in record["messages"]] == [
        ("user", True)
    ]


def test_an_ownerless_conversation_belongs_to_the_default_user(host: Host, data_dir: Path) -> None:
    host.capture(run_event(owner=None))
    assert records(data_dir)[0]["user_peer_id"] == "user"


def test_a_long_text_is_split_into_parts_with_part_metadata(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_message_length=100)
    host.capture(run_event(inputs=[{"entry_id": 1, "text": "x" * 230}]))
    [record] = records(data_dir)
    users = [m for m in record["messages"] if m["role"] == "user"]
    assert [len(m["text"]) for m in users] == [100, 100, 30]
    assert [(m["meta"]["part"], m["meta"]["parts"]) for m in users] == [(1, 3), (2, 3), (3, 3)]
    assert "".join(m["text"] for m in users) == "x" * 230


def test_a_changed_setting_applies_at_the_next_capture_without_restart(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    host.capture(run_event("r-1", inputs=[{"entry_id": 1, "text": "y" * 150}]))
    write_settings(config_dir, max_message_length=100)
    host.capture(run_event("r-2", inputs=[{"entry_id": 1, "text": "y" * 150}]))
    first, second = records(data_dir)
    assert len([m for m in first["messages"] if m["role"] == "user"]) == 1
    assert len([m for m in second["messages"] if m["role"] == "user"]) == 2


# ---- refusals ----------------------------------------------------------------------------


def test_a_run_over_the_byte_ceiling_is_refused_with_the_limit_and_changes_nothing(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    host.capture(run_event("r-0"))
    write_settings(config_dir, max_batch_bytes=2048)
    before = snapshot(data_dir)
    with pytest.raises(CaptureTooLarge) as caught:
        host.capture(run_event("r-1", inputs=[{"entry_id": 1, "text": CONTENT * 200}]))
    assert caught.value.code == "ERR_CAPTURE_TOO_LARGE"
    assert "2048" in str(caught.value) and caught.value.details["limit"] == 2048
    assert CONTENT not in str(caught.value) and CONTENT not in json.dumps(caught.value.as_dict())
    assert snapshot(data_dir) == before
    assert host.capture(run_event("r-2")).status == "captured"  # a small run still goes in


def test_a_conversation_at_its_pending_limit_is_refused_with_the_limit_and_changes_nothing(
    host: Host, config_dir: Path, data_dir: Path
) -> None:
    write_settings(config_dir, max_pending_batches=3)
    for i in range(3):
        host.capture(run_event(f"r-{i}"))
    before = snapshot(data_dir)
    with pytest.raises(OutboxCapacity) as caught:
        host.capture(run_event("r-3", inputs=[{"entry_id": 1, "text": CONTENT}]))
    assert caught.value.code == "ERR_OUTBOX_CAPACITY"
    assert "3" in caught.value.message and caught.value.details["limit"] == 3
    assert CONTENT not in str(caught.value)
    assert snapshot(data_dir) == before
    assert (
        host.capture(run_event("r-0", conversation="c-other")).status == "captured"
    )  # per conversation


@pytest.mark.parametrize(
    "event",
    [
        None,
        42,
        "a run",
        [("conversation_id", "c")],
        {},
        run_event(conversation=7),
        run_event(run_id=""),
        run_event(inputs=[{"entry_id": "17", "text": "x"}]),
        run_event(inputs=[{"entry_id": 1, "text": CONTENT.encode()}]),
        run_event(inputs={"entry_id": 1, "text": CONTENT}),
        run_event(outcome={"status": "answered"}),
        run_event(outcome={"status": CONTENT}),
        run_event(selection=CONTENT),
        run_event(surprise=CONTENT),
        {**run_event(), CONTENT + " as a key": 1},
        run_event(inputs=[{"entry_id": 1, "text": "a\ud800" + CONTENT}]),
    ],
)
def test_a_malformed_run_is_refused_as_invalid_event_without_echoing_its_content(
    host: Host, data_dir: Path, event: Any
) -> None:
    with pytest.raises(InvalidEvent) as caught:
        host.capture(event)
    assert caught.value.code == "ERR_INVALID_EVENT"
    assert CONTENT not in str(caught.value) and CONTENT not in json.dumps(caught.value.as_dict())
    assert snapshot(data_dir) == {}


@pytest.mark.parametrize(
    "changes",
    [
        {"conversation_id": ""},
        {"conversation_id": " c"},
        {"conversation_id": "c\x00" + CONTENT},
        {"conversation_id": "x" * 257},
        {"owner": ""},
        {"owner": "o" * 257},
    ],
)
def test_an_unmappable_id_is_refused_as_invalid_id_and_writes_nothing(
    host: Host, data_dir: Path, changes: dict[str, Any]
) -> None:
    with pytest.raises(InvalidId) as caught:
        host.capture(run_event(**changes))
    assert CONTENT not in str(caught.value)
    assert snapshot(data_dir) == {}


json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
texts = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="ab \n\ud800", max_size=10),
    st.integers(min_value=1, max_value=3).map(lambda n: "z" * (1500 * n)),
)
fields = {
    "conversation_id": st.one_of(st.text(max_size=12), st.sampled_from(["c-1", "c-2", "../x"])),
    "owner": st.one_of(st.none(), st.text(max_size=12)),
    "run_id": st.one_of(st.sampled_from(["r-1", "r-2", "r-3"]), st.text(max_size=8)),
    "inputs": st.lists(
        st.fixed_dictionaries({"entry_id": st.integers(min_value=-1, max_value=99), "text": texts}),
        max_size=3,
    ),
    "outcome": st.one_of(
        st.just({"status": "unanswered"}),
        st.fixed_dictionaries(
            {
                "status": st.just("answered"),
                "answer": st.fixed_dictionaries(
                    {
                        "entry_id": st.integers(min_value=0, max_value=99),
                        "content": st.lists(
                            st.fixed_dictionaries(
                                {"type": st.sampled_from(["text", "image"]), "text": texts}
                            ),
                            max_size=2,
                        ),
                    }
                ),
            }
        ),
    ),
    "selection": st.one_of(
        st.none(),
        st.lists(st.sampled_from(["memhoncho", "other"]), max_size=2),
        st.fixed_dictionaries({"add": st.lists(st.text(max_size=3), max_size=1)}),
    ),
}
valid_runs = st.fixed_dictionaries(
    {
        "conversation_id": st.from_regex(r"[A-Za-z0-9 .@/_-]{0,10}[a-z]", fullmatch=True),
        "owner": st.one_of(st.none(), st.emails()),
        "run_id": st.text(min_size=1, max_size=12),
        "inputs": st.lists(
            st.fixed_dictionaries(
                {"entry_id": st.integers(min_value=0, max_value=99), "text": texts}
            ),
            min_size=1,
            max_size=3,
        ),
        "outcome": fields["outcome"],
    }
)
events = st.one_of(
    valid_runs,
    valid_runs,
    json_values,
    st.fixed_dictionaries(
        {name: strategy for name, strategy in fields.items() if name != "selection"},
        optional={"selection": fields["selection"]},
    ),
    # a well-shaped run with one field replaced by anything at all (wrong types included)
    st.tuples(st.fixed_dictionaries(fields), st.sampled_from(sorted(fields)), json_values).map(
        lambda t: {**t[0], t[1]: t[2]}
    ),
    st.fixed_dictionaries(fields).map(lambda e: {**e, "extra": 1}),
)


def test_any_event_is_stored_or_refused_with_a_typed_error_and_nothing_written_on_refusal(
    tmp_path: Path,
) -> None:
    config, data = tmp_path / "hc", tmp_path / "hd"
    write_settings(config, max_batch_bytes=4096, max_message_length=1000)
    seen: Counter[str] = Counter()
    with Host(config_dir=config, data_dir=data, init=True) as host:

        @settings(
            max_examples=1000,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(events)
        def check(event: Any) -> None:
            before = snapshot(data)
            try:
                result = host.capture(event)
            except (InvalidEvent, InvalidId, CaptureTooLarge, RunConflict) as exc:
                seen[exc.code] += 1
                assert snapshot(data) == before
                return
            seen[result.status] += 1
            after = snapshot(data)
            if result.status == "captured":
                key = ids.conversation_key(event["conversation_id"])
                batches = [r["batch_id"] for r in host.deployment.store().records(key)]
                assert batches.count(result.batch_id) == 1
                changed = {name for name in after if after[name] != before.get(name)}
                assert changed == {f"outbox/{key}.jsonl"}
            else:
                assert after == before

        check()
    assert sum(seen.values()) >= 1000
    # The strategy reaches every outcome (a guard against a strategy that only makes garbage).
    for outcome in ("captured", "ERR_INVALID_EVENT", "ERR_INVALID_ID", "ERR_CAPTURE_TOO_LARGE"):
        assert seen[outcome] > 0, seen
