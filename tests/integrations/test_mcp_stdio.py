"""``memhoncho mcp`` over stdio, driven by the ``mcp`` SDK's own client: its tools and their
schemas, the save tool's answers, refusals that carry memhoncho's errors and write nothing, and
the prompt sections as a resource and a prompt. No Honcho and no worker here (see
test_mcp_delivery.py for those)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_support import (
    answer,
    records,
    refusal,
    server_env,
    stdio_session,
    tree,
    write_scoped_snapshot,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment
from memhoncho.integrations.mcp import scope
from memhoncho.recall import tools as recall_tools
from memhoncho.recall.arguments import parameters_schema
from memhoncho.testing.config import write_settings

OWNER = "ana@example.com"
CEILING = 64 * 1024  # bytes: max_batch_bytes of these tests, so an oversize text is cheap


@pytest.fixture
def settings(config_dir: Path) -> dict[str, Any]:
    values = {"max_batch_bytes": CEILING}
    write_settings(config_dir, **values)
    return values


def run(coroutine: Any, *args: Any) -> Any:
    return anyio.run(coroutine, *args)


def test_the_tools_are_todays_recall_tools_and_save_with_their_schemas(
    config_dir: Path, data_dir: Path, host: Host
) -> None:
    async def listed() -> list[Any]:
        async with stdio_session(config_dir, data_dir, "--owner", OWNER) as session:
            return list((await session.list_tools()).tools)

    tools = {tool.name: tool for tool in run(listed)}
    assert list(tools) == [*recall_tools.TOOLS, "honcho_save"]
    for definition in host.tool_definitions():  # what a Python host hands its model today
        function = definition["function"]
        assert tools[function["name"]].description == function["description"]
        assert _unlimited(tools[function["name"]].input_schema) == _unlimited(
            function["parameters"]
        )
    for name, tool in recall_tools.TOOLS.items():
        assert _unlimited(tools[name].input_schema) == _unlimited(parameters_schema(tool.arguments))
    for tool in tools.values():  # the one limit scope.scoped enforces, advertised by every tool
        if "conversation_id" in tool.input_schema["properties"]:
            text = tool.input_schema["properties"]["conversation_id"]["anyOf"][0]
            assert (text["minLength"], text["maxLength"]) == (1, scope.MAX_CONVERSATION_CHARS)
    save = tools["honcho_save"].input_schema
    assert save["additionalProperties"] is False
    assert set(save["properties"]) == {"user", "assistant", "messages", "conversation_id", "run_id"}
    assert tools["honcho_save"].annotations.idempotent_hint is True  # a retry stores once
    said = tools["honcho_save"].output_schema
    assert said is not None and said["properties"]["hint"]["anyOf"][1] == {"type": "null"}
    assert set(said["required"]) == {
        "status",
        "saved",
        "conversation_id",
        "run_id",
        "hint",
        "about",
    }
    assert tools["honcho_search"].annotations.read_only_hint is True
    for tool in tools.values():  # whose memory is never the model's to choose
        assert "owner" not in tool.input_schema["properties"]


def _unlimited(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without its conversation id's length limits (the MCP server's are its own)."""
    copied = json.loads(json.dumps(schema))
    for option in copied["properties"].get("conversation_id", {}).get("anyOf", []):
        option.pop("minLength", None)
        option.pop("maxLength", None)
    return copied


def test_a_conversation_id_as_long_as_the_schemas_say_is_taken_by_every_tool(
    config_dir: Path, data_dir: Path, settings: dict[str, Any]
) -> None:
    longest = "c" * scope.MAX_CONVERSATION_CHARS

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], Any]:
        async with stdio_session(config_dir, data_dir, "--owner", OWNER) as session:
            saved = answer(
                await session.call_tool("honcho_save", {"user": "hi", "conversation_id": longest})
            )
            # No API key: remember reaches the Honcho check, past every id check.
            remembered = refusal(
                await session.call_tool(
                    "honcho_remember", {"content": "likes tea", "conversation_id": longest}
                )
            )
            sections = await session.read_resource(f"memhoncho://sections/{longest}")
            return saved, remembered, sections

    saved, remembered, sections = run(scenario)
    assert saved["status"] == "captured" and saved["conversation_id"] == longest
    assert remembered["code"] == "ERR_NO_API_KEY"
    assert json.loads(sections.contents[0].text)["conversation_id"] == longest


def test_a_save_is_durable_when_it_answers_and_a_retry_stores_it_once(
    config_dir: Path, data_dir: Path, settings: dict[str, Any]
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with stdio_session(config_dir, data_dir, "--owner", OWNER) as session:
            answers = []
            turn = {"user": "I moved to Lisbon", "assistant": "Noted: Lisbon."}
            for _ in range(2):  # a client retrying a call whose answer it lost
                answers.append(answer(await session.call_tool("honcho_save", turn)))
                assert len(records(config_dir, data_dir, OWNER, "default")) == 1
            given = {"messages": [{"role": "user", "content": "same words"}], "run_id": "m-1"}
            answers.append(answer(await session.call_tool("honcho_save", given)))
            answers.append(answer(await session.call_tool("honcho_save", given)))
            other = {"user": "same words", "run_id": "m-2", "conversation_id": "trip"}
            answers.append(answer(await session.call_tool("honcho_save", other)))
            # the first turn's words said again, other turns between: a new turn, kept
            answers.append(answer(await session.call_tool("honcho_save", turn)))
            return answers

    first, again, given, given_again, other, said_again = run(scenario)
    assert first["status"] == "captured" and first["saved"] is True
    assert first["run_id"].startswith("mcp-") and first["conversation_id"] == "default"
    # No API key in this deployment: the answer says nothing moves yet, as capture prints it.
    assert first["hint"] == "no-key" and "API key" in first["about"]
    assert again == {**first, "status": "duplicate", "hint": None, "about": again["about"]}
    assert (given["status"], given_again["status"]) == ("captured", "duplicate")
    assert given["run_id"] == "m-1"
    assert other["status"] == "captured" and other["conversation_id"] == "trip"
    stored = records(config_dir, data_dir, OWNER, "default")
    assert said_again["status"] == "captured" and said_again["run_id"] != first["run_id"]
    assert [[m["text"] for m in r["messages"]] for r in stored] == [
        ["I moved to Lisbon", "Noted: Lisbon."],
        ["same words"],
        ["I moved to Lisbon", "Noted: Lisbon."],
    ]
    assert [m["role"] for m in stored[0]["messages"]] == ["user", "agent"]
    assert {r["owner"] for r in stored} == {OWNER}  # the server's owner, no argument's
    assert len(records(config_dir, data_dir, OWNER, "trip")) == 1


def test_bad_input_answers_memhoncho_errors_and_writes_nothing(
    config_dir: Path, data_dir: Path, settings: dict[str, Any]
) -> None:
    bad_calls: list[tuple[str, dict[str, Any], str]] = [
        ("honcho_save", {"user": 3}, "ERR_TOOL_ARGUMENTS"),
        ("honcho_save", {"messages": "hello"}, "ERR_TOOL_ARGUMENTS"),
        ("honcho_save", {"user": "hi", "owner": "bo"}, "ERR_TOOL_ARGUMENTS"),
        ("honcho_save", {}, "ERR_TOOL_ARGUMENTS"),
        (
            "honcho_save",
            {"user": "a", "messages": [{"role": "user", "content": "b"}]},
            "ERR_TOOL_ARGUMENTS",
        ),
        (
            "honcho_save",
            {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]},
            "ERR_TOOL_ARGUMENTS",
        ),
        ("honcho_save", {"user": "x" * (2 * CEILING)}, "ERR_CAPTURE_TOO_LARGE"),
        ("honcho_save", {"user": "hi", "conversation_id": " padded"}, "ERR_INVALID_ID"),
        ("honcho_save", {"user": "hi", "conversation_id": "a\nb"}, "ERR_INVALID_ID"),
        ("honcho_save", {"user": "hi", "conversation_id": "c" * 129}, "ERR_INVALID_ID"),
        ("honcho_save", {"user": "hi", "conversation_id": "a\u202eb"}, "ERR_INVALID_ID"),
        ("honcho_save", {"user": "hi", "conversation_id": "a\u200bb"}, "ERR_INVALID_ID"),
        (
            "honcho_remember",
            {"content": "likes tea", "conversation_id": "c" * 129},
            "ERR_INVALID_ID",
        ),
        ("honcho_search", {"query": 5}, "ERR_TOOL_ARGUMENTS"),
        ("honcho_chat", {"query": "why", "reasoning_level": "extreme"}, "ERR_TOOL_ARGUMENTS"),
        ("honcho_remember", {"content": "likes tea", "conversation_id": "\tx"}, "ERR_INVALID_ID"),
    ]

    async def scenario() -> tuple[list[dict[str, Any]], list[Any]]:
        async with stdio_session(config_dir, data_dir, "--owner", OWNER) as session:
            answer(await session.call_tool("honcho_save", {"user": "a first turn"}))
            before = tree(data_dir)
            errors = [refusal(await session.call_tool(n, a)) for n, a, _ in bad_calls]
            protocol = []
            for request in (
                session.call_tool("honcho_forget", {"everything": True}),
                session.read_resource("memhoncho://sections/%20padded"),
                session.read_resource("memhoncho://elsewhere/x"),
                session.get_prompt("secrets", {}),
                session.get_prompt("memory", {"conversation_id": "ok", "owner": "bo"}),
            ):
                with pytest.raises(MCPError) as refused:
                    await request
                protocol.append(refused.value.error)
            assert tree(data_dir) == before  # not a byte, not a lock file
            return errors, protocol

    errors, protocol = run(scenario)
    assert [e["code"] for e in errors] == [code for _, _, code in bad_calls]
    for error in errors:
        assert error["message"].startswith("memhoncho honcho_")
        assert "x" * 100 not in error["message"]  # a refusal does not echo the text
    unknown, padded, elsewhere, no_prompt, prompt_owner = protocol
    assert unknown.code == mcp_types.INVALID_PARAMS
    assert unknown.data["code"] == "ERR_TOOL_ARGUMENTS"
    assert unknown.message == f"ERR_TOOL_ARGUMENTS: {unknown.data['message']}"
    assert "honcho_save" in unknown.data["message"]
    assert padded.data["code"] == "ERR_INVALID_ID"
    assert elsewhere.data["code"] == "ERR_INVALID_INPUT"
    assert no_prompt.data["code"] == prompt_owner.data["code"] == "ERR_INVALID_INPUT"


def test_the_prompt_sections_are_a_resource_and_a_prompt_of_the_owner_only(
    config_dir: Path, data_dir: Path, settings: dict[str, Any]
) -> None:
    deployment = Deployment(config_dir, data_dir)
    write_scoped_snapshot(
        deployment, OWNER, "trip", "Ana travels by train.", peer_card=["Lives in Lisbon"]
    )

    async def read(owner: str, default: str) -> tuple[Any, Any, Any, Any, Any]:
        options = ("--owner", owner, "--conversation", default)
        async with stdio_session(config_dir, data_dir, *options) as session:
            templates = await session.list_resource_templates()
            resource = await session.read_resource("memhoncho://sections/trip")
            prompts = await session.list_prompts()
            prompt = await session.get_prompt("memory", {"conversation_id": "trip"})
            default_prompt = await session.get_prompt("memory", {})
            return templates, resource, prompts, prompt, default_prompt

    templates, resource, prompts, prompt, default_prompt = run(read, OWNER, "trip")
    assert [t.uri_template for t in templates.resource_templates] == [
        "memhoncho://sections/{conversation_id}"
    ]
    content = resource.contents[0]
    assert content.mime_type == "application/json"
    sections = json.loads(content.text)
    assert sections["status"] == "fresh" and sections["conversation_id"] == "trip"
    assert "Ana travels by train." in sections["text"]
    assert "Lives in Lisbon" in sections["text"]
    assert [p.name for p in prompts.prompts] == ["memory"]
    assert prompt.messages[0].content.text == sections["text"]
    assert default_prompt.messages[0].content.text == sections["text"]

    _, other, _, other_prompt, _ = run(read, "bo", "trip")  # another owner's "trip"
    theirs = json.loads(other.contents[0].text)
    assert theirs["status"] == "missing" and theirs["text"] == ""
    assert "Ana" not in other_prompt.messages[0].content.text


def test_import_memhoncho_and_the_cli_parser_load_no_mcp_sdk() -> None:
    code = (
        "import sys, memhoncho, memhoncho.cli\n"
        "try:\n"
        "    memhoncho.cli.main(['mcp', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--tokens-file" in out.stdout  # the parser was built, with this command
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _requests(*calls: dict[str, Any]) -> str:
    """A client's side of a session as JSON-RPC lines: initialize, then ``calls``."""
    lines: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "lines", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    for number, call in enumerate(calls, start=1):
        lines.append({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": call})
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.mark.parametrize("pipes", ["lean", "sdk"])
def test_stdio_answers_on_lean_pipes_or_the_sdks_with_only_protocol_on_stdout(
    config_dir: Path, data_dir: Path, pipes: str
) -> None:
    big = "word " * 40_000  # 200 KB: one line past asyncio's default 64 KiB line limit
    save = {"name": "honcho_save", "arguments": {"user": "said once", "assistant": big}}
    server = subprocess.Popen(
        [sys.executable, "-m", "memhoncho", "mcp", "--owner", OWNER, "--stdio-pipes", pipes],
        env=server_env(config_dir, data_dir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(_requests(save, save).encode())
        server.stdin.flush()
        # every line on stdout is a JSON-RPC answer: initialize's, then both saves'
        answers = {}
        while len(answers) < 3:
            line = server.stdout.readline()
            assert line, "the server closed stdout before answering"
            found = json.loads(line)
            answers[found["id"]] = found
        server.stdin.close()  # the client hangs up: the server ends
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
    statuses = [answers[n]["result"]["structuredContent"]["status"] for n in (1, 2)]
    assert sorted(statuses) == ["captured", "duplicate"]  # served at once, in either order
    assert len(records(config_dir, data_dir, OWNER, "default")) == 1


def test_a_file_as_stdin_is_served_by_the_sdks_path(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """No pipe the loop can watch: the lean pipes step aside, the SDK's own files serve."""
    requests = tmp_path / "requests.jsonl"
    requests.write_text(_requests(), encoding="utf-8")
    with requests.open("rb") as stdin:
        served = subprocess.run(
            [sys.executable, "-m", "memhoncho", "mcp", "--owner", OWNER],
            env=server_env(config_dir, data_dir),
            stdin=stdin,
            capture_output=True,
            timeout=120,
        )
    assert served.returncode == 0, served.stderr.decode()
    (initialized,) = [json.loads(line) for line in served.stdout.decode().splitlines()]
    assert initialized["result"]["serverInfo"]["name"] == "memhoncho"
