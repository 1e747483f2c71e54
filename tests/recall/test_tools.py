"""Recall tools in process: search, chat and remember, scoped to their author (what they
refuse, their failures and schemas: ``test_tools_checks.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tools_support
from tools_support import (
    ANA,
    BOB,
    SECRET_KEY,
    assert_names_memhoncho_not_the_key,
)

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoNoLLM,
)
from memhoncho.recall import tools
from memhoncho.recall.honcho_tools import (
    TRUNCATION_MARK,
    honcho_chat,
    honcho_remember,
    honcho_search,
)
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings
from memhoncho.testing.seed import seed_conversation
from memhoncho.testing.standin_state import ApiError

pytestmark = pytest.mark.standin(llm=True, api_key=SECRET_KEY)
settings = tools_support.settings  # a fixture


# ------------------------------------------------------------------------------- search


def test_search_returns_only_the_calling_users_words_even_when_others_said_the_same(
    deployment: Deployment,
) -> None:
    seed_conversation(
        deployment, "ana-run", ANA, ["my marathon knee hurts"], ["marathon knee: rest"]
    )
    seed_conversation(deployment, "bob-run", BOB, ["bob's marathon knee is fine"])

    found = honcho_search(deployment, ANA, {"query": "marathon knee"})

    assert [r["text"] for r in found["results"]] == ["my marathon knee hurts"]
    assert found["results"][0]["conversation_id"] == "ana-run"
    assert found["results"][0]["created_at"]
    assert found["count"] == 1
    bob = honcho_search(deployment, BOB, {"query": "marathon knee"})
    assert [r["text"] for r in bob["results"]] == ["bob's marathon knee is fine"]
    json.dumps(found)  # plain JSON


def test_search_finds_the_users_words_across_every_conversation(deployment: Deployment) -> None:
    seed_conversation(deployment, "run-1", ANA, ["training for a marathon"])
    seed_conversation(deployment, "run-2", ANA, ["the marathon is in April"])

    found = honcho_search(deployment, ANA, {"query": "marathon"})

    assert {r["conversation_id"] for r in found["results"]} == {"run-1", "run-2"}


def test_search_names_a_forked_conversation_through_its_ledger(deployment: Deployment) -> None:
    seed_conversation(deployment, "child.conv", ANA, ["fork words"], session_id="clone_random_id")

    found = honcho_search(deployment, ANA, {"query": "fork"})

    assert found["results"][0]["conversation_id"] == "child.conv"


def test_search_trims_each_result_and_returns_at_most_the_search_limit(
    deployment: Deployment, config_dir: Path, settings: dict[str, Any]
) -> None:
    write_settings(config_dir, **settings, search_limit=2, tool_preview_length=20)
    seed_conversation(deployment, "long", ANA, [f"needle {i} " + "x" * 100 for i in range(4)])

    found = honcho_search(deployment, ANA, {"query": "needle"})

    assert found["count"] == 2
    for result in found["results"]:
        assert len(result["text"]) == 20
        assert result["text"].endswith(TRUNCATION_MARK)
        assert result["truncated"] is True


def test_search_by_a_user_honcho_has_never_seen_finds_nothing(
    deployment: Deployment, standin: HonchoStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert honcho_search(deployment, "newcomer", {"query": "anything"})["count"] == 0

    def unknown_peer(*args: Any, **kwargs: Any) -> Any:
        raise ApiError(404, "Peer not found")  # what a stricter server may answer

    monkeypatch.setattr(standin._store, "search", unknown_peer)
    assert honcho_search(deployment, "newcomer", {"query": "anything"})["count"] == 0


def test_search_for_an_ownerless_conversation_uses_the_default_user(deployment: Deployment) -> None:
    seed_conversation(deployment, "nobody", None, ["ownerless words"])

    found = honcho_search(deployment, None, {"query": "ownerless"})

    assert [r["text"] for r in found["results"]] == ["ownerless words"]


# --------------------------------------------------------------------------------- chat


def test_chat_answers_from_the_agents_view_of_the_calling_user_only(deployment: Deployment) -> None:
    honcho_remember(deployment, ANA, {"content": "Ana runs marathons."})
    honcho_remember(deployment, BOB, {"content": "Bob keeps bees."})

    answer = honcho_chat(
        deployment, ANA, {"query": "What does the user do?", "reasoning_level": "low"}
    )

    assert "Ana runs marathons." in answer["answer"]
    assert "bees" not in answer["answer"]
    assert answer["reasoning_level"] == "low"


@pytest.mark.parametrize("level", ["minimal", "low", "medium", "high", "max"])
def test_chat_accepts_each_of_honchos_reasoning_levels(deployment: Deployment, level: str) -> None:
    assert honcho_chat(deployment, ANA, {"query": "hi", "reasoning_level": level})["answer"]


@pytest.mark.parametrize(
    ("missing", "name", "arguments"),
    [("llm", tools.CHAT, {"query": "anything?"}), ("embeddings", tools.REMEMBER, {"content": "x"})],
)
def test_chat_without_an_llm_and_remember_without_embeddings_are_typed_errors(
    deployment: Deployment,
    standin: HonchoStandIn,
    missing: str,
    name: str,
    arguments: dict[str, Any],
) -> None:
    setattr(standin, missing, False)

    with pytest.raises(HonchoNoLLM) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    assert_names_memhoncho_not_the_key(caught.value)


def test_chat_with_an_empty_answer_is_a_typed_error(
    deployment: Deployment, standin: HonchoStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a streaming chat gives on a server without an LLM: 200 and nothing in it.
    monkeypatch.setattr(standin._store, "chat_answer", lambda *args: "")

    with pytest.raises(HonchoNoLLM) as caught:
        tools.call_tool(deployment, tools.CHAT, {"query": "anything?"}, ANA)

    assert_names_memhoncho_not_the_key(caught.value)


# ----------------------------------------------------------------------------- remember


def test_remember_without_a_conversation_is_user_level(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    result = honcho_remember(deployment, ANA, {"content": "Ana prefers mornings."})

    assert result["scope"] == "user"
    assert result["conversation_id"] is None
    (stored,) = standin.conclusions(workspace_id)
    assert stored["session_id"] is None
    assert stored["observer_id"] == "agent"
    assert stored["observed_id"] == ids.peer_id(ANA)
    assert stored["id"] == result["conclusion_id"]


def test_remember_with_a_conversation_is_stamped_with_its_session(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    session_id = seed_conversation(deployment, "ana-run", ANA, ["hello"])

    result = honcho_remember(
        deployment, ANA, {"content": "Ana's knee hurts.", "conversation_id": "ana-run"}
    )

    assert result["scope"] == "conversation"
    assert result["conversation_id"] == "ana-run"
    (stored,) = standin.conclusions(workspace_id)
    assert stored["session_id"] == session_id == ids.session_id(workspace_id, "ana-run")


def test_remember_in_a_forked_conversation_uses_the_session_its_ledger_names(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    seed_conversation(deployment, "child", ANA, ["hello"], session_id="clone_abc")

    result = honcho_remember(deployment, ANA, {"content": "x", "conversation_id": "child"})

    assert result["scope"] == "conversation"
    assert standin.conclusions(workspace_id)[0]["session_id"] == "clone_abc"


@pytest.mark.parametrize("conversation", ["bob-run", "never-seen"])
def test_remember_with_someone_elses_or_an_unknown_conversation_stays_user_level(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str, conversation: str
) -> None:
    seed_conversation(deployment, "bob-run", BOB, ["bob's words"])

    result = honcho_remember(
        deployment, ANA, {"content": "Ana likes tea.", "conversation_id": conversation}
    )

    assert result["scope"] == "user"
    assert result["conversation_id"] is None
    assert "in general" in result["note"]
    assert BOB not in json.dumps(result)
    (stored,) = standin.conclusions(workspace_id)
    assert stored["session_id"] is None
    assert stored["observed_id"] == ids.peer_id(ANA)
