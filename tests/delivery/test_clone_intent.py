"""The clone intent is typed in memory and stored as the strings it always was."""

from __future__ import annotations

import json

from memhoncho.models import CloneIntent, CloneStage, Ledger

#: a ledger as versions before the typed intent wrote it: every value a string
OLD_LEDGER = {
    "conversation_id": "chat-child",
    "clone_intent": {
        "parent_session_id": "s-parent",
        "anchor_entry": "12",
        "anchor_message_id": "m-12",
        "tag": "0f1e2d3c",
        "stage": "cloning",
        "at": "1764777600.123456",
    },
}


def test_a_ledger_written_before_the_typed_intent_reads_into_it() -> None:
    intent = Ledger.model_validate_json(json.dumps(OLD_LEDGER)).clone_intent

    assert intent == CloneIntent(
        parent_session_id="s-parent",
        anchor_entry=12,
        anchor_message_id="m-12",
        tag="0f1e2d3c",
        stage=CloneStage.CLONING,
        at=1764777600.123456,
    )


def test_the_intent_is_written_back_exactly_as_an_older_version_wrote_it() -> None:
    ledger = Ledger.model_validate_json(json.dumps(OLD_LEDGER))

    assert json.loads(ledger.model_dump_json())["clone_intent"] == OLD_LEDGER["clone_intent"]


def test_the_clone_session_id_is_stored_only_once_it_is_known() -> None:
    ledger = Ledger.model_validate_json(json.dumps(OLD_LEDGER))
    assert ledger.clone_intent is not None
    cloned = ledger.clone_intent.model_copy(
        update={"stage": CloneStage.CLONED, "clone_session_id": "s-clone"}
    )

    stored = json.loads(ledger.model_copy(update={"clone_intent": cloned}).model_dump_json())

    assert stored["clone_intent"]["clone_session_id"] == "s-clone"
    assert stored["clone_intent"]["stage"] == "cloned"
    assert all(isinstance(value, str) for value in stored["clone_intent"].values())
    assert Ledger.model_validate(stored).clone_intent == cloned
