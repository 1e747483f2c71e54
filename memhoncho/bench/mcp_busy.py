"""``memhoncho bench mcp-busy``: one owner's saves while another owner's recall hangs.

Issue 30's scenario, whole processes: a ``memhoncho mcp --http`` server with two owners'
tokens, the stand-in Honcho holding every chat (as a hung Honcho would, up to the chat
timeout). Owner B saves ``samples`` turns with nothing else in flight; then owner A starts
``FLOOD`` ``honcho_chat`` calls at once (each let-in call hangs, the rest are refused with
``ERR_RECALL_BUSY``) and B saves as many turns again. B's save latency both ways, in one
run (a few first saves, which load the server's modules, not counted).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memhoncho.bench.figures import latency_figures
from memhoncho.testing.ports import free_port

DEFAULT_SAMPLES = 50  # B's saves, idle and busy
WARMUP = 5  # B's saves before the idle ones, not counted
FLOOD = 60  # A's honcho_chat calls started at once
HANG_S = 60.0  # seconds the stand-in holds each chat (and memhoncho's chat timeout)
KEY = "sk-bench-mcp-busy"
OWNERS = {"ana@example.com": "ana-bench-token-0123456789", "bo": "bo-bench-token-0123456789ab"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    from memhoncho.deployment import initialise
    from memhoncho.testing import HonchoStandIn
    from memhoncho.testing.config import point_at_standin
    from memhoncho.testing.processes import memhoncho_env, terminate, wait_until

    samples = args.samples or DEFAULT_SAMPLES
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-mcp-busy-") as tmp:
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        config_dir.mkdir()
        initialise(data_dir)  # as `memhoncho init`: the server refuses a new folder
        tokens = Path(tmp) / "tokens"
        tokens.write_text("".join(f"{t} {o}\n" for o, t in OWNERS.items()), encoding="utf-8")
        tokens.chmod(0o600)  # the server refuses a tokens file others can read
        with HonchoStandIn(api_key=KEY, llm=True, port=free_port()) as standin:
            point_at_standin(config_dir, standin, "bench-busy", KEY, chat_timeout_s=HANG_S)
            standin.faults.add(
                "timeout_before_commit", path_contains="/chat", count=None, sleep_s=HANG_S
            )
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "memhoncho", "mcp", "--http", f"127.0.0.1:{port}"]
                + ["--tokens-file", str(tokens)],
                env=memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_until(lambda: _listening(port), "the MCP HTTP server", 60)
                url = f"http://127.0.0.1:{port}/mcp"
                result: dict[str, Any] = anyio.run(_measure, url, samples)
                result["chats_reaching_honcho"] = standin.request_count("/chat")
            finally:
                terminate(server, timeout_s=10)
                standin.faults.clear()
    result.update(samples=samples, flood=FLOOD)
    return result


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


async def _measure(url: str, samples: int) -> dict[str, Any]:
    import anyio

    ana_token, bo_token = OWNERS.values()
    answered: list[str] = []
    async with _session(url, bo_token) as bo_session:
        await _saves(bo_session, WARMUP, "warmup")  # the server's first save loads its modules
        idle = await _saves(bo_session, samples, "idle")
        async with _session(url, ana_token) as ana_session, anyio.create_task_group() as group:

            async def chat() -> None:
                result = await ana_session.call_tool("honcho_chat", {"query": "What is liked?"})
                code = (result.structured_content or {}).get("error", {}).get("code", "answered")
                answered.append(code)

            began = time.perf_counter()
            for _ in range(FLOOD):
                group.start_soon(chat)
            with anyio.fail_after(HANG_S / 2):
                while len(answered) < FLOOD - 8:  # the refusals; the let-in calls hang
                    await anyio.sleep(0.01)
            refused_in_s = time.perf_counter() - began
            busy = await _saves(bo_session, samples, "busy")
            hanging = FLOOD - len(answered)
            group.cancel_scope.cancel()
    idle_fig, busy_fig = latency_figures(idle), latency_figures(busy)
    return {
        "save_idle": idle_fig,
        "save_while_other_owner_recall_hangs": busy_fig,
        "busy_over_idle_p99": round(busy_fig["p99_ms"] / idle_fig["p99_ms"], 2),
        "recall_refused": answered.count("ERR_RECALL_BUSY"),
        "recall_refused_within_s": round(refused_in_s, 3),
        "recall_still_hanging_after_saves": hanging,
    }


async def _saves(session: Any, samples: int, conversation: str) -> list[float]:
    took = []
    for i in range(samples):
        arguments = {"user": f"turn {i}", "assistant": "noted", "conversation_id": conversation}
        start = time.perf_counter()
        result = await session.call_tool("honcho_save", arguments)
        took.append((time.perf_counter() - start) * 1000)
        if result.is_error:
            raise RuntimeError(f"the bench's save was refused: {result.content}")
    return took


def _session(url: str, token: str) -> Any:
    from contextlib import asynccontextmanager

    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def opened() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=HANG_S * 2) as client,
            streamable_http_client(url, http_client=client) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return opened()
