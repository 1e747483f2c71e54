"""Recall tools in process: what they refuse (validation), how Honcho's failures reach the model
(typed, never the key), the schemas they publish, and the host's door to them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tools_support
from jsonschema.validators import Draft202012Validator
from tools_support import (
    ANA,
    BOB,
    FAST_TIMEOUT_S,
    FAULT_SLEEP_S,
    SECRET_KEY,
    assert_names_memhoncho_not_the_key,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoNoLLM,
    HonchoRateLimited,
    HonchoTimeout,
    HonchoUnavailable,
    InvalidToolCall,
    MemhonchoError,
    MissingApiKey,
)
from memhoncho.recall import tools
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_settings
from memhoncho.testing.seed import seed_conversation

pytestmark = pytest.mark.standin(llm=True, api_key=SECRET_KEY)
settings = tools_support.settings  # a fixture


# --------------------------------------------------------------------------- validation

BAD_CALLS: list[tuple[str, str, Any, str]] = [
    ("search-missing-query", tools.SEARCH, {}, "query is required"),
    ("search-empty-query", tools.SEARCH, {"query": ""}, "query"),
    ("search-blank-query", tools.SEARCH, {"query": "   "}, "query must not be blank"),
    ("search-long-query", tools.SEARCH, {"query": "q" * 2_001}, "query"),
    ("search-number", tools.SEARCH, {"query": 7}, "query"),
    ("search-owner", tools.SEARCH, {"query": "q", "owner": BOB}, "owner is not an argument"),
    ("chat-long-query", tools.CHAT, {"query": "q" * 10_001}, "query"),
    ("chat-bad-level", tools.CHAT, {"query": "q", "reasoning_level": "extreme"}, "reasoning"),
    ("remember-long", tools.REMEMBER, {"content": "c" * 65_536}, "content"),
    ("remember-blank", tools.REMEMBER, {"content": "\n\t "}, "content must not be blank"),
    ("remember-bad-conv", tools.REMEMBER, {"content": "c", "conversation_id": " x"}, "conv"),
    ("not-json", tools.SEARCH, "{query: nope", "not valid JSON"),
    ("not-an-object", tools.SEARCH, ["query"], "must be a JSON object"),
    ("unknown-tool", "honcho_delete_everything", {}, "has no tool"),
]


@pytest.mark.parametrize(
    ("name", "arguments", "says"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_a_bad_call_is_refused_clearly_and_sends_nothing(
    deployment: Deployment, standin: HonchoStandIn, name: str, arguments: Any, says: str
) -> None:
    seed_conversation(deployment, "x", ANA, [])
    before = standin.request_count()

    with pytest.raises(InvalidToolCall) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    assert caught.value.code == "ERR_TOOL_ARGUMENTS"
    assert caught.value.message.startswith("memhoncho")
    assert says in caught.value.message
    assert standin.request_count() == before


def test_a_refusal_never_echoes_the_arguments_content(deployment: Deployment) -> None:
    secret = "my PIN is 4321"
    with pytest.raises(InvalidToolCall) as caught:
        tools.call_tool(deployment, tools.SEARCH, {"query": secret, secret: 1, "n": 2}, ANA)

    assert secret not in json.dumps(tools.error_payload(caught.value))
    assert "n is not an argument" in caught.value.message


def test_arguments_may_come_as_the_json_string_a_model_api_sends(deployment: Deployment) -> None:
    seed_conversation(deployment, "run", ANA, ["json words"])

    found = tools.call_tool(deployment, tools.SEARCH, '{"query": "json"}', ANA)

    assert found["count"] == 1


# ----------------------------------------------------------------------------- failures

ALL_CALLS = [
    (tools.SEARCH, {"query": "knee"}),
    (tools.CHAT, {"query": "knee?"}),
    (tools.REMEMBER, {"content": "knee"}),
]


@pytest.mark.parametrize(("name", "arguments"), ALL_CALLS, ids=[c[0] for c in ALL_CALLS])
@pytest.mark.parametrize(
    ("fault", "error"),
    [("http_503", HonchoUnavailable), ("http_500", HonchoUnavailable)],
)
def test_a_server_error_is_a_typed_error_naming_memhoncho(
    deployment: Deployment,
    standin: HonchoStandIn,
    name: str,
    arguments: dict[str, Any],
    fault: str,
    error: type[MemhonchoError],
) -> None:
    standin.faults.add(fault, count=None, path_contains="/peers/")
    standin.faults.add(fault, count=None, path_contains="/conclusions")

    with pytest.raises(MemhonchoError) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    # A 500 from chat is what a server without an LLM answers; elsewhere it is a server error.
    expected = HonchoNoLLM if (name, fault) == (tools.CHAT, "http_500") else error
    assert type(caught.value) is expected
    assert_names_memhoncho_not_the_key(caught.value)


@pytest.mark.parametrize(("name", "arguments"), ALL_CALLS, ids=[c[0] for c in ALL_CALLS])
def test_a_rate_limit_is_a_typed_error_with_its_retry_after(
    deployment: Deployment, standin: HonchoStandIn, name: str, arguments: dict[str, Any]
) -> None:
    standin.faults.add("http_429", count=None, retry_after_s=3)

    with pytest.raises(HonchoRateLimited) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    assert caught.value.retry_after_s == 3
    assert tools.error_payload(caught.value)["retry_after_s"] == 3
    assert_names_memhoncho_not_the_key(caught.value)


@pytest.mark.parametrize(("name", "arguments"), ALL_CALLS, ids=[c[0] for c in ALL_CALLS])
def test_a_slow_honcho_is_a_typed_timeout_after_the_settings_timeout(
    deployment: Deployment,
    standin: HonchoStandIn,
    config_dir: Path,
    settings: dict[str, Any],
    name: str,
    arguments: dict[str, Any],
) -> None:
    write_settings(
        config_dir, **settings, tool_timeout_s=FAST_TIMEOUT_S, chat_timeout_s=FAST_TIMEOUT_S
    )
    # Workspace and peer get-or-creates answer at once; the tool's own call is held.
    for path in ("/search", "/chat", "/conclusions"):
        standin.faults.add("timeout_before_commit", path_contains=path, sleep_s=FAULT_SLEEP_S)

    with pytest.raises(HonchoTimeout) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    assert_names_memhoncho_not_the_key(caught.value)


@pytest.mark.parametrize(("name", "arguments"), ALL_CALLS, ids=[c[0] for c in ALL_CALLS])
def test_honcho_down_is_a_typed_error(
    deployment: Deployment, standin: HonchoStandIn, name: str, arguments: dict[str, Any]
) -> None:
    standin.stop()  # nothing listens on its port any more

    with pytest.raises(HonchoUnavailable) as caught:
        tools.call_tool(deployment, name, arguments, ANA)

    assert_names_memhoncho_not_the_key(caught.value)


def test_no_api_key_is_a_typed_error_naming_memhoncho(
    deployment: Deployment, config_dir: Path
) -> None:
    (config_dir / "secrets.json").unlink()

    with pytest.raises(MissingApiKey) as caught:
        tools.call_tool(deployment, tools.SEARCH, {"query": "x"}, ANA)

    assert caught.value.message.startswith("memhoncho")


# ------------------------------------------------------------------------------ schemas


def _walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_each_schema_is_a_valid_2020_12_schema_in_the_function_calling_format() -> None:
    definitions = tools.tool_definitions()

    assert [d["function"]["name"] for d in definitions] == [
        tools.SEARCH,
        tools.CHAT,
        tools.REMEMBER,
    ]
    for definition in definitions:
        assert definition["type"] == "function"
        function = definition["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert function["description"]
        parameters = function["parameters"]
        Draft202012Validator.check_schema(parameters)
        assert parameters["type"] == "object"
        assert parameters["additionalProperties"] is False
        assert "owner" not in parameters["properties"]
        for node in _walk(parameters):
            assert not (isinstance(node, dict) and ({"$ref", "$defs"} & set(node)))
        json.loads(json.dumps(definition))


def test_the_search_description_says_it_returns_the_users_words_not_the_agents() -> None:
    (search,) = [d for d in tools.tool_definitions() if d["function"]["name"] == tools.SEARCH]
    assert "the user's words only, never the agent's replies" in search["function"]["description"]


SAMPLES: list[tuple[str, dict[str, Any], bool]] = [
    (tools.SEARCH, {"query": "knee"}, True),
    (tools.SEARCH, {}, False),
    (tools.SEARCH, {"query": "   "}, False),
    (tools.SEARCH, {"query": "knee", "owner": BOB}, False),
    (tools.CHAT, {"query": "what?"}, True),
    (tools.CHAT, {"query": "what?", "reasoning_level": "max"}, True),
    (tools.CHAT, {"query": "what?", "reasoning_level": None}, True),
    (tools.CHAT, {"query": "what?", "reasoning_level": "huge"}, False),
    (tools.CHAT, {"query": "q" * 10_001}, False),
    (tools.REMEMBER, {"content": "fact"}, True),
    (tools.REMEMBER, {"content": "fact", "conversation_id": "c-1"}, True),
    (tools.REMEMBER, {"content": "c" * 65_536}, False),
    (tools.REMEMBER, {"content": "fact", "conversation_id": 3}, False),
]


@pytest.mark.parametrize(("name", "arguments", "valid"), SAMPLES)
def test_the_schema_and_the_tool_agree_on_sample_arguments(
    name: str, arguments: dict[str, Any], valid: bool
) -> None:
    (definition,) = [d for d in tools.tool_definitions() if d["function"]["name"] == name]
    validator = Draft202012Validator(definition["function"]["parameters"])

    assert validator.is_valid(arguments) is valid
    if valid:
        tools.check_call(name, arguments)
    else:
        with pytest.raises(InvalidToolCall):
            tools.check_call(name, arguments)


# --------------------------------------------------------------------------------- host


def test_the_host_binds_the_tools_to_one_user(host: Host, deployment: Deployment) -> None:
    seed_conversation(deployment, "ana-run", ANA, ["ana's garden"])
    seed_conversation(deployment, "bob-run", BOB, ["bob's garden"])

    ana = host.tools(ANA)

    assert set(ana) == {tools.SEARCH, tools.CHAT, tools.REMEMBER}
    assert [r["text"] for r in ana.honcho_search("garden")["results"]] == ["ana's garden"]
    assert ana[tools.SEARCH](query="garden")["count"] == 1
    assert ana.call(tools.SEARCH, '{"query": "garden"}')["count"] == 1
    assert ana.honcho_remember("likes roses", "ana-run")["scope"] == "conversation"
    assert "likes roses" in ana.honcho_chat("garden?", "minimal")["answer"]
    assert "likes roses" not in host.tools(BOB).honcho_chat("garden?")["answer"]
    assert host.tool_definitions() == tools.tool_definitions() == ana.definitions()


def test_host_call_tool_dispatches_a_models_call_for_the_given_owner(host: Host) -> None:
    result = host.call_tool(tools.REMEMBER, {"content": "likes tea"}, owner=ANA)

    assert result["scope"] == "user"
    with pytest.raises(InvalidToolCall):
        host.call_tool(tools.SEARCH, {"query": "x", "owner": BOB}, owner=ANA)
    with pytest.raises(InvalidToolCall):
        host.tools(ANA)["honcho_nope"]
