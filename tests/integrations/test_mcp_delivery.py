"""Saves over stdio while Honcho is down, then a real worker over a real Redis delivers them:
every turn lands once and in order (``memhoncho audit`` says so), a retried save is stored
once, "yes" said twice turns apart is stored twice, and the recall tools answer from the
stand-in, or a typed error while it is down."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_support import (
    MEMHONCHO,
    answer,
    free_port,
    records,
    refusal,
    server_env,
    stdio_session,
    wait_for,
)

from memhoncho import ids
from memhoncho.integrations.mcp import scope
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.processes import CeleryProcess, memhoncho_env
from memhoncho.testing.runs import answer_text, expected_texts, user_text

pytestmark = pytest.mark.slow

KEY = "sk-mcp-delivery-key"
OWNER = "ana@example.com"
NAMES = ("trip", "work", "home")
TURNS = 100  # turns saved in each conversation
GIVEN_IDS = "trip"  # this conversation's saves pass run ids; the others' are derived
REPEATS = "chat"  # "yes" said twice, turns apart, without run ids
YES = {"user": "yes", "assistant": "Done.", "conversation_id": REPEATS}
BETWEEN = {"user": "and the hotel?", "assistant": "Booked.", "conversation_id": REPEATS}


def turn(name: str, i: int) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "user": user_text(name, i),
        "assistant": answer_text(name, i),
        "conversation_id": name,
    }
    if name == GIVEN_IDS:
        arguments["run_id"] = f"turn-{i}"
    return arguments


def test_saves_made_while_honcho_is_down_land_once_in_order_and_recall_answers(
    config_dir: Path, data_dir: Path, workspace_id: str, redis_url: str
) -> None:
    standin = HonchoStandIn(api_key=KEY, llm=True, port=free_port()).start()
    point_at_standin(config_dir, standin, workspace_id, KEY, broker_url=redis_url)
    standin.stop()  # Honcho is down until the saves are made; it comes back on the same port
    worker = CeleryProcess(
        "worker", memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)
    )
    try:
        outcome = anyio.run(scenario, config_dir, data_dir, standin, worker)
    finally:
        worker.stop()
        standin.stop()

    down_search, saved, retried, search, chat, sections, audit = outcome
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["ok"] is True
    audited = {c["conversation_id"]: c for c in report["conversations"]}
    assert set(audited) == {scope.scoped(OWNER, name) for name in (*NAMES, REPEATS)}
    for name in NAMES:
        conversation = audited[scope.scoped(OWNER, name)]
        assert conversation["held"] == 2 * TURNS and conversation["duplicated"] == {}
    repeats = ids.session_id(workspace_id, scope.scoped(OWNER, REPEATS))
    held = [m["content"] for m in standin.messages(workspace_id, repeats)]
    assert held == ["yes", "Done.", "and the hotel?", "Booked.", "yes", "Done."]
    assert down_search["code"] == "ERR_HONCHO_UNREACHABLE"  # stopped: refused, never sent
    assert {s["status"] for s in saved} == {"captured"}
    assert {r["status"] for r in retried} == {"duplicate"}
    for name in NAMES:  # once each, in the order saved, nothing else
        session_id = ids.session_id(workspace_id, scope.scoped(OWNER, name))
        held = [m["content"] for m in standin.messages(workspace_id, session_id)]
        assert held == expected_texts(name, TURNS)
    found = [(r["conversation_id"], r["text"]) for r in search["results"]]
    assert found == [("work", user_text("work", 42))]  # the client's name of the conversation
    assert isinstance(chat["answer"], str) and chat["answer"].strip()
    assert sections["status"] == "fresh" and sections["conversation_id"] == "work"


async def scenario(
    config_dir: Path, data_dir: Path, standin: HonchoStandIn, worker: CeleryProcess
) -> tuple[Any, ...]:
    async with stdio_session(config_dir, data_dir, "--owner", OWNER) as session:
        down = refusal(await session.call_tool("honcho_search", {"query": "question"}))
        saved = []
        for i in range(TURNS):
            for name in NAMES:
                saved.append(answer(await session.call_tool("honcho_save", turn(name, i))))
                # the answer came once the turn was on disk, Honcho down or not
                assert len(records(config_dir, data_dir, OWNER, name)) == i + 1
        for arguments in (YES, YES, BETWEEN, YES, YES):  # each YES once more: its retry
            answer(await session.call_tool("honcho_save", arguments))
        # a retry repeats the conversation's latest save (or a given run id, any turn's)
        last = [turn(n, TURNS - 1) for n in NAMES[1:]]
        retried = [answer(await session.call_tool("honcho_save", t)) for t in last]
        retried.append(answer(await session.call_tool("honcho_save", turn(GIVEN_IDS, 10))))

        await anyio.to_thread.run_sync(standin.start)
        await anyio.to_thread.run_sync(worker.start)
        await anyio.to_thread.run_sync(
            wait_for,
            lambda: _held(standin) >= len(NAMES) * TURNS * 2 + 6,
            "every saved turn in the stand-in",
        )
        # after delivery the ledger, not the outbox, knows the turn: still stored once
        retried += [answer(await session.call_tool("honcho_save", t)) for t in last]
        retried.append(answer(await session.call_tool("honcho_save", turn(GIVEN_IDS, 20))))
        retried.append(answer(await session.call_tool("honcho_save", YES)))
        search = answer(await session.call_tool("honcho_search", {"query": user_text("work", 42)}))
        chat = answer(await session.call_tool("honcho_chat", {"query": "What does Ana ask?"}))

        async def refreshed() -> dict[str, Any]:
            for _ in range(480):  # the refresh after the first delivery: a worker's task
                resource = await session.read_resource("memhoncho://sections/work")
                sections = json.loads(resource.contents[0].text)
                if sections["status"] != "missing":
                    return dict(sections)
                await anyio.sleep(0.25)
            raise AssertionError("no snapshot of 'work' after its first delivery")

        sections = await refreshed()
        audit = await anyio.to_thread.run_sync(_audit, config_dir, data_dir)
        return down, saved, retried, search, chat, sections, audit


def _audit(config_dir: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``memhoncho audit``: read-only, Honcho against the ledgers; exit 0 when all is well."""
    return subprocess.run(
        [*MEMHONCHO, "audit", "--json"],
        env=server_env(config_dir, data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _held(standin: HonchoStandIn) -> int:
    state = standin.state()["workspaces"]
    return sum(len(s["messages"]) for ws in state.values() for s in ws.get("sessions", {}).values())
