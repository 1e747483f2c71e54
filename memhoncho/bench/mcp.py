"""``memhoncho bench mcp``: what a save costs an MCP client, beside the capture it wraps.

One run, one data directory: two ``memhoncho mcp`` processes over stdio driven by the SDK's
own client, one on memhoncho's lean pipes (the default), one on the SDK's threaded files
(``--stdio-pipes sdk``), and a ``Host`` in this process. Samples alternate: a ``honcho_save``
round trip on each server (JSON-RPC over the pipes, the server's thread hop, ``Host.capture``),
then an in-process ``Host.capture`` of a run of the same shape, each a new turn (captured, not
a duplicate), each path in its own conversation; the two servers take turns going first. A
ping round trip shows each transport's own floor. No API key is configured, so neither path
publishes a hint: both are the append and fsync, and the difference is MCP's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from memhoncho.bench.figures import latency_figures

DEFAULT_SAMPLES = 200  # saves, and as many captures
WARMUP = 10  # of each, not counted
USER_CHARS = 600  # the turn: about 2.6 KB of text, as `bench capture` measures
ANSWER_CHARS = 2_000
OWNER = "bench@example.com"
GOAL_RATIO = 2.0  # a save against an in-process capture (issue 33)
PIPES = ("lean", "sdk")  # memhoncho mcp --stdio-pipes: both servers run, samples alternate


def _turn(i: int) -> tuple[str, str]:
    user = (f"turn {i}: " + "the user asks about trains to Porto " * 40)[:USER_CHARS]
    answer = (f"answer {i}: " + "the assistant lists the morning departures " * 100)[:ANSWER_CHARS]
    return user, answer


def run(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    from memhoncho.deployment import initialise

    samples = args.samples or DEFAULT_SAMPLES
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-mcp-") as tmp:
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        config_dir.mkdir()
        initialise(data_dir)  # as `memhoncho init`: the server refuses a new folder
        result: dict[str, Any] = anyio.run(_measure, config_dir, data_dir, samples)
    result.update(samples=samples, mcp_sdk=metadata.version("mcp"))
    return result


async def _measure(config_dir: Path, data_dir: Path, samples: int) -> dict[str, Any]:
    from memhoncho.capture.host import Host
    from memhoncho.integrations.mcp import save

    pings: dict[str, list[float]] = {pipes: [] for pipes in PIPES}
    saves: dict[str, list[float]] = {pipes: [] for pipes in PIPES}
    captures: list[float] = []
    with Host(config_dir, data_dir) as host:
        async with (
            _server(config_dir, data_dir, "lean") as lean,
            _server(config_dir, data_dir, "sdk") as sdk,
        ):
            for i in range(WARMUP + samples):
                user, answer = _turn(i)
                order = [("lean", lean), ("sdk", sdk)]
                for pipes, session in order if i % 2 else order[::-1]:
                    start = time.perf_counter()
                    await session.send_ping()
                    pinged = time.perf_counter()
                    arguments = {"user": user, "assistant": answer, "conversation_id": pipes}
                    saved = await session.call_tool("honcho_save", arguments)
                    done = time.perf_counter()
                    status = (saved.structured_content or {}).get("status")
                    if saved.is_error or status != "captured":
                        raise RuntimeError(f"the bench's save was not captured: {saved.content}")
                    if i >= WARMUP:
                        pings[pipes].append((pinged - start) * 1000)
                        saves[pipes].append((done - pinged) * 1000)
                turn = [(save.USER, user), (save.ASSISTANT, answer)]
                event = save.run_event(OWNER, "in-process", f"bench-{i}", turn)
                began = time.perf_counter()
                captured = host.capture(event)
                ended = time.perf_counter()
                if str(captured.status) != "captured":
                    raise RuntimeError(f"the bench's capture was {captured.status}")
                if i >= WARMUP:
                    captures.append((ended - began) * 1000)
    capture_fig = latency_figures(captures)
    lean_fig, sdk_fig = latency_figures(saves["lean"]), latency_figures(saves["sdk"])
    return {
        "turn_chars": USER_CHARS + ANSWER_CHARS,
        "mcp_save_stdio": lean_fig,
        "mcp_save_stdio_sdk_pipes": sdk_fig,
        "host_capture_in_process": capture_fig,
        "mcp_ping_stdio": latency_figures(pings["lean"]),
        "mcp_ping_stdio_sdk_pipes": latency_figures(pings["sdk"]),
        "save_over_capture_p50": round(lean_fig["p50_ms"] / capture_fig["p50_ms"], 2),
        "goal_ratio": GOAL_RATIO,
        "sdk_pipes_save_over_capture_p50": round(sdk_fig["p50_ms"] / capture_fig["p50_ms"], 2),
        "save_minus_capture_p50_ms": round(lean_fig["p50_ms"] - capture_fig["p50_ms"], 3),
        "hints": "none: no API key, so both paths are the append and fsync",
    }


@asynccontextmanager
async def _server(config_dir: Path, data_dir: Path, pipes: str) -> AsyncIterator[Any]:
    """A ``memhoncho mcp`` process over stdio with ``--stdio-pipes pipes``, initialized."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from memhoncho.testing.processes import memhoncho_env

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memhoncho", "mcp", "--owner", OWNER, "--stdio-pipes", pipes],
        env=memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session
