"""``memhoncho mcp --http``: streamable HTTP behind bearer tokens that each name one owner.

No token or a wrong one is refused (401) and writes nothing; a token file that changes applies
at the next request; two owners' tokens never reach each other's memory, down to Honcho."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp_support import (
    MEMHONCHO,
    answer,
    free_port,
    http_server,
    http_session,
    records,
    server_env,
    tree,
    wait_for,
    write_scoped_snapshot,
)

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.integrations.mcp import auth, scope
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.processes import CeleryProcess, memhoncho_env

ANA, BO = "ana@example.com", "bo"
ANA_TOKEN = "ana-token-0123456789abcdef"
BO_TOKEN = "bo-token-0123456789abcdefgh"
KEY = "sk-mcp-http-key"
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


def tokens_file(tmp_path: Path, lines: str) -> Path:
    path = tmp_path / "mcp-tokens"
    path.write_text(lines, encoding="utf-8")
    path.chmod(0o600)  # the server refuses a tokens file others can read
    return path


def post(url: str, body: dict[str, Any], token: str | None, **headers: str) -> httpx2.Response:
    sent = dict(MCP_ACCEPT, **headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, json=body, headers=sent, timeout=30)


def save_call(text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "honcho_save", "arguments": {"user": text}},
    }


def test_no_token_or_a_wrong_token_is_refused_and_writes_nothing(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    tokens = tokens_file(tmp_path, f"# operator's tokens\n{ANA_TOKEN} {ANA}\n\n{BO_TOKEN} {BO}\n")
    with http_server(config_dir, data_dir, "--tokens-file", str(tokens)) as url:
        before = tree(data_dir)
        for token, headers in (
            (None, {}),
            ("wrong-token-0123456789abcdef", {}),
            (ANA_TOKEN[:-1], {}),
            (None, {"Authorization": ANA_TOKEN}),  # no scheme
            (None, {"Authorization": f"Basic {ANA_TOKEN}"}),
        ):
            for body in (INITIALIZE, save_call("never stored")):
                refused = post(url, body, token, **headers)
                assert refused.status_code == 401, refused.text
                assert refused.json()["error"] == "invalid_token"

        async def sdk_client(token: str) -> None:
            async with http_session(url, token) as session:
                await session.call_tool("honcho_save", {"user": "never stored"})

        for token in (None, "wrong-token-0123456789abcdef"):
            with pytest.raises(BaseException) as failed:  # the SDK raises a group on a 401
                anyio.run(sdk_client, token)
            assert "never stored" not in str(failed.value)
        assert tree(data_dir) == before

        async def saves(token: str, text: str) -> dict[str, Any]:
            async with http_session(url, token) as session:
                return answer(await session.call_tool("honcho_save", {"user": text}))

        assert anyio.run(saves, ANA_TOKEN, "ana was here")["status"] == "captured"
        assert [r["owner"] for r in records(config_dir, data_dir, ANA, "default")] == [ANA]

        # the operator revokes Ana's token and adds one: the next request sees the change
        new_token = "ana-second-token-0123456789"
        tokens.write_text(f"{new_token} {ANA}\n{BO_TOKEN} {BO}\n", encoding="utf-8")
        assert post(url, INITIALIZE, ANA_TOKEN).status_code == 401
        assert anyio.run(saves, new_token, "again")["status"] == "captured"
        # a tokens file that stops parsing refuses every token (fail closed)
        tokens.write_text(f"{BO_TOKEN}\n", encoding="utf-8")
        assert post(url, INITIALIZE, BO_TOKEN).status_code == 401
        assert len(records(config_dir, data_dir, BO, "default")) == 0


def test_a_session_opened_with_one_owners_token_is_refused_to_another_owner(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    phone = "ana-phone-token-0123456789"  # ana's second token: her session is hers on both
    tokens = tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\n{phone} {ANA}\n")
    with http_server(config_dir, data_dir, "--tokens-file", str(tokens)) as url:
        opened = post(url, INITIALIZE, ANA_TOKEN)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        hijack = post(url, save_call("bo as ana"), BO_TOKEN, **{"mcp-session-id": session})
        assert hijack.status_code in (403, 404), hijack.text
        assert records(config_dir, data_dir, ANA, "default") == []
        assert records(config_dir, data_dir, BO, "default") == []
        notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        post(url, notified, ANA_TOKEN, **{"mcp-session-id": session})
        same_owner = post(url, save_call("from the phone"), phone, **{"mcp-session-id": session})
        assert same_owner.status_code == 200, same_owner.text
        saved = records(config_dir, data_dir, ANA, "default")
        assert [m["text"] for r in saved for m in r["messages"]] == ["from the phone"]


def test_each_token_reads_the_prompt_sections_of_its_owner_only(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    deployment = Deployment(config_dir, data_dir)
    write_scoped_snapshot(deployment, ANA, "work", "Ana keeps her notes in Portuguese.")
    tokens = tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\n")

    async def sections(url: str, token: str) -> dict[str, Any]:
        async with http_session(url, token) as session:
            resource = await session.read_resource("memhoncho://sections/work")
            return dict(json.loads(resource.contents[0].text))

    with http_server(config_dir, data_dir, "--tokens-file", str(tokens)) as url:
        anas, bos = anyio.run(sections, url, ANA_TOKEN), anyio.run(sections, url, BO_TOKEN)
    assert anas["status"] == "fresh" and "Portuguese" in anas["text"]
    assert bos["status"] == "missing" and bos["text"] == ""


def test_the_http_server_needs_tokens_that_name_owners(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--tokens-file, or --token-file with --owner"):
        auth.OwnerTokens()
    with pytest.raises(ConfigError, match="needs --owner"):
        auth.OwnerTokens(token_file=str(tokens_file(tmp_path, ANA_TOKEN)))
    for lines, reason in (
        ("", "no '<token> <owner>' line"),
        (f"{ANA_TOKEN}\n", "line 1: expected '<token> <owner>'"),
        ("short ana\n", "line 1: a token must have at least 16 characters"),
        (f"{ANA_TOKEN} ana\n{ANA_TOKEN} bo\n", "line 2: this token is already given"),
        (f"{ANA_TOKEN} ana\n{BO_TOKEN} b\x00o\n", "line 2: owner: owner contains a control"),
        (f"{ANA_TOKEN} \x1b[1mana\n", "line 1: owner: owner contains a control"),
        (f"{ANA_TOKEN} an\u200ba\n", "line 1: owner: owner contains an invisible"),
    ):
        with pytest.raises(ConfigError, match=reason):
            auth.OwnerTokens(tokens_file=str(tokens_file(tmp_path, lines)))
    one = auth.OwnerTokens(token_file=str(tokens_file(tmp_path, f"{ANA_TOKEN}\n")), owner=ANA)
    assert one.owner_of(ANA_TOKEN) == ANA
    assert one.owner_of(BO_TOKEN) is None
    with pytest.raises(ConfigError, match="--owner: owner contains a control"):
        auth.OwnerTokens(token_file=str(tokens_file(tmp_path, f"{ANA_TOKEN}\n")), owner="a\x07")


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o640])
def test_a_tokens_file_other_users_can_read_is_refused_at_start(tmp_path: Path, mode: int) -> None:
    path = tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match="other users can read it: chmod 600"):
        auth.OwnerTokens(tokens_file=str(path))
    with pytest.raises(ConfigError, match="other users can read it"):
        auth.OwnerTokens(token_file=str(path), owner=ANA)


def test_a_tokens_file_that_gains_a_bad_owner_refuses_every_token(tmp_path: Path) -> None:
    path = tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\n")
    served = auth.OwnerTokens(tokens_file=str(path))
    assert served.owner_of(BO_TOKEN) == BO
    tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\x00\n")  # an editor's slip
    assert served.owner_of(BO_TOKEN) is None and served.owner_of(ANA_TOKEN) is None


@pytest.mark.slow
def test_two_owners_tokens_never_see_each_others_memory(
    tmp_path: Path, config_dir: Path, data_dir: Path, workspace_id: str, redis_url: str
) -> None:
    standin = HonchoStandIn(api_key=KEY, llm=True, port=free_port()).start()
    point_at_standin(config_dir, standin, workspace_id, KEY, broker_url=redis_url)
    tokens = tokens_file(tmp_path, f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\n")
    worker = CeleryProcess(
        "worker", memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    )
    try:
        with http_server(config_dir, data_dir, "--tokens-file", str(tokens)) as url:
            worker.start()
            seen = anyio.run(two_owners, url, standin)
    finally:
        worker.stop()
        standin.stop()
    for owner, other in ((ANA, BO), (BO, ANA)):
        search, remembered, chat = seen[owner]
        texts = [r["text"] for r in search["results"]]
        assert texts and all(t.startswith(f"{owner} secret") for t in texts), texts
        assert all(r["conversation_id"] == "work" for r in search["results"])
        assert remembered["scope"] == "conversation" and remembered["conversation_id"] == "work"
        assert f"{owner} likes" in chat["answer"] and f"{other} likes" not in chat["answer"]
        # one Honcho session of "work" per owner, holding that owner's words only
        session_id = ids.session_id(workspace_id, scope.scoped(owner, "work"))
        held = [m["content"] for m in standin.messages(workspace_id, session_id)]
        assert held == [f"{owner} secret {i}" for i in range(3)]


async def two_owners(url: str, standin: HonchoStandIn) -> dict[str, Any]:
    for owner, token in ((ANA, ANA_TOKEN), (BO, BO_TOKEN)):
        async with http_session(url, token) as session:
            for i in range(3):  # the same conversation name for both
                arguments = {"user": f"{owner} secret {i}", "conversation_id": "work"}
                assert answer(await session.call_tool("honcho_save", arguments))["saved"]
    await anyio.to_thread.run_sync(
        wait_for, lambda: _held(standin) >= 6, "both owners' turns in the stand-in"
    )
    seen: dict[str, Any] = {}
    for owner, token in ((ANA, ANA_TOKEN), (BO, BO_TOKEN)):
        async with http_session(url, token) as session:
            search = answer(await session.call_tool("honcho_search", {"query": "secret"}))
            fact = {"content": f"{owner} likes tea", "conversation_id": "work"}
            remembered = answer(await session.call_tool("honcho_remember", fact))
            chat = answer(await session.call_tool("honcho_chat", {"query": "What is liked?"}))
            seen[owner] = (search, remembered, chat)
    return seen


def _held(standin: HonchoStandIn) -> int:
    state = standin.state()["workspaces"]
    return sum(len(s["messages"]) for ws in state.values() for s in ws.get("sessions", {}).values())


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--http", "127.0.0.1:8766"], "--http needs --tokens-file, or --token-file with --owner"),
        (["--http", "localhost"], "--http must be HOST:PORT"),
        (["--tokens-file", "/nonexistent"], "--tokens-file and --token-file go with --http"),
        (["--conversation", " padded"], "conversation id must not be blank or padded"),
        (["--conversation", "wo\u202erk"], "conversation id contains an invisible"),
        (["--owner", "\x1b]0;pwned\x07ana"], "--owner: owner contains a control"),
        (["--owner", "ana\u200d"], "--owner: owner contains an invisible"),
        (["--http", "127.0.0.1:8766", "--tokens-file", "/nonexistent"], "cannot read"),
    ],
)
def test_a_server_that_cannot_serve_safely_refuses_to_start(
    config_dir: Path, data_dir: Path, options: list[str], reason: str
) -> None:
    before = tree(data_dir)  # the fixture's data dir is initialised (its identity file)
    started = subprocess.run(
        [*MEMHONCHO, "mcp", *options],
        env=server_env(config_dir, data_dir),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert started.returncode == 2, started.stderr
    assert reason in started.stderr and "ERR_" in started.stderr
    assert tree(data_dir) == before
