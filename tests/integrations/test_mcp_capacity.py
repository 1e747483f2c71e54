"""Saves never wait behind recall: with Honcho hanging and one owner's ``honcho_chat`` calls
filling its share, another owner's saves and sections answer while those calls still hang, and
recall past the bounds is refused at once with ``ERR_RECALL_BUSY``, never queued. Real server
processes (HTTP with two tokens, and stdio) against the stand-in with its chat held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_support import (
    answer,
    free_port,
    http_server,
    http_session,
    records,
    refusal,
    stdio_session,
)

from memhoncho.errors import RecallBusy
from memhoncho.integrations.mcp.capacity import RECALL_PER_OWNER, Capacity
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin

KEY = "sk-mcp-capacity-key"
ANA, BO = "ana@example.com", "bo"
ANA_TOKEN = "ana-token-0123456789abcdef"
BO_TOKEN = "bo-token-0123456789abcdefgh"
HANG_S = 40.0  # seconds the stand-in holds each chat, and memhoncho's chat timeout
IN_FLIGHT = 60  # ana's honcho_chat calls started at once
SAVES = 50  # bo's saves while ana's calls hang
CHAT = {"query": "What does the user like?"}


def test_recall_past_an_owners_share_or_the_total_is_refused_and_frees_when_done() -> None:
    capacity = Capacity(per_owner=2, total=3, local=1)
    with capacity.recall_slot("ana"), capacity.recall_slot("ana"):
        with (
            pytest.raises(RecallBusy, match="this user already has 2"),
            capacity.recall_slot("ana"),
        ):
            pass
        with (
            capacity.recall_slot(None),  # the ownerless user is an owner of its own
            pytest.raises(RecallBusy, match="the server has 3") as busy,
            capacity.recall_slot("bo"),
        ):
            pass
    assert busy.value.code == "ERR_RECALL_BUSY" and "bo" not in busy.value.message
    with capacity.recall_slot("ana"), capacity.recall_slot("ana"), capacity.recall_slot("bo"):
        pass  # every slot was given back, refusals included


@pytest.fixture
def hanging_honcho(config_dir: Path, workspace_id: str) -> Any:
    standin = HonchoStandIn(api_key=KEY, llm=True, port=free_port()).start()
    point_at_standin(config_dir, standin, workspace_id, KEY, chat_timeout_s=HANG_S)
    standin.faults.add("timeout_before_commit", path_contains="/chat", count=None, sleep_s=HANG_S)
    try:
        yield standin
    finally:
        standin.faults.clear()
        standin.stop()


async def _flood(session: Any, answered: list[dict[str, Any]], calls: int) -> None:
    """``calls`` honcho_chat calls at once; each answer (refusal or not) lands in ``answered``."""

    async def one() -> None:
        result = await session.call_tool("honcho_chat", CHAT)
        answered.append(refusal(result) if result.is_error else answer(result))

    async with anyio.create_task_group() as group:
        for _ in range(calls):
            group.start_soon(one)


async def _busy_refusals(answered: list[dict[str, Any]], refused: int) -> None:
    with anyio.fail_after(120):
        while len(answered) < refused:
            await anyio.sleep(0.05)
    assert {a.get("code") for a in answered} == {"ERR_RECALL_BUSY"}


@pytest.mark.slow
def test_one_owners_hanging_recall_never_holds_another_owners_saves(
    tmp_path: Path, config_dir: Path, data_dir: Path, hanging_honcho: HonchoStandIn
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ANA_TOKEN} {ANA}\n{BO_TOKEN} {BO}\n", encoding="utf-8")
    tokens.chmod(0o600)

    async def scenario(url: str) -> tuple[list[Any], list[Any], list[Any], Any]:
        flooded: list[dict[str, Any]] = []
        async with http_session(url, ANA_TOKEN) as ana, anyio.create_task_group() as group:
            group.start_soon(_flood, ana, flooded, IN_FLIGHT)
            await _busy_refusals(flooded, IN_FLIGHT - RECALL_PER_OWNER)
            async with http_session(url, BO_TOKEN) as bo:
                saved = []
                for i in range(SAVES):
                    turn = {"user": f"bo's turn {i}", "conversation_id": "work"}
                    saved.append(answer(await bo.call_tool("honcho_save", turn)))
                sections = await bo.read_resource("memhoncho://sections/work")
                bos_own: list[dict[str, Any]] = []
                with anyio.move_on_after(1.0):  # bo's share is bo's: his call is let in
                    await _flood(bo, bos_own, 1)
                # ana's calls that were let in are all still waiting for Honcho
                still_hanging = list(flooded)
            group.cancel_scope.cancel()
        return saved, still_hanging, bos_own, sections

    with http_server(config_dir, data_dir, "--tokens-file", str(tokens)) as url:
        saved, still_hanging, bos_own, sections = anyio.run(scenario, url)
    assert [s["status"] for s in saved] == ["captured"] * SAVES
    assert len(records(config_dir, data_dir, BO, "work")) == SAVES
    assert len(still_hanging) == IN_FLIGHT - RECALL_PER_OWNER  # only the refusals answered
    assert bos_own == []  # not refused: in flight, held by Honcho like ana's
    assert json.loads(sections.contents[0].text)["status"] == "missing"
    assert hanging_honcho.request_count("/chat") == RECALL_PER_OWNER + 1


@pytest.mark.slow
def test_over_stdio_a_save_and_the_sections_answer_while_recall_hangs(
    config_dir: Path, data_dir: Path, hanging_honcho: HonchoStandIn
) -> None:
    calls = RECALL_PER_OWNER + 4

    async def scenario() -> tuple[list[Any], Any, Any]:
        flooded: list[dict[str, Any]] = []
        async with (
            stdio_session(config_dir, data_dir, "--owner", ANA) as session,
            anyio.create_task_group() as group,
        ):
            group.start_soon(_flood, session, flooded, calls)
            await _busy_refusals(flooded, calls - RECALL_PER_OWNER)
            saved = answer(await session.call_tool("honcho_save", {"user": "still here"}))
            prompt = await session.get_prompt("memory", {})
            answered = list(flooded)
            group.cancel_scope.cancel()
        return answered, saved, prompt

    answered, saved, prompt = anyio.run(scenario)
    assert len(answered) == calls - RECALL_PER_OWNER  # the let-in calls still hang
    assert saved["status"] == "captured"
    assert "nothing for this conversation yet" in prompt.messages[0].content.text
