"""``memhoncho bench mcp``: what a save costs an MCP client, beside the capture it wraps.

One run, one data directory: a ``memhoncho mcp`` process over stdio driven by the SDK's own
client, and a ``Host`` in this process. Samples alternate: a ``honcho_save`` round trip (JSON-RPC
over the pipes, the server's thread hop, ``Host.capture``), then an in-process ``Host.capture``
of a run of the same shape, each a new turn (captured, not a duplicate), each path in its own
conversation. A ping round trip shows the transport's own floor. No API key is configured, so
neither path publishes a hint: both are the append and fsync, and the difference is MCP's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from memhoncho.bench.figures import latency_figures

DEFAULT_SAMPLES = 200  # saves, and as many captures
WARMUP = 10  # of each, not counted
USER_CHARS = 600  # the turn: about 2.6 KB of text, as `bench capture` measures
ANSWER_CHARS = 2_000
OWNER = "bench@example.com"


def _turn(i: int) -> tuple[str, str]:
    user = (f"turn {i}: " + "the user asks about trains to Porto " * 40)[:USER_CHARS]
    answer = (f"answer {i}: " + "the assistant lists the morning departures " * 100)[:ANSWER_CHARS]
    return user, answer


def run(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    samples = args.samples or DEFAULT_SAMPLES
    with tempfile.TemporaryDirectory(prefix="memhoncho-bench-mcp-") as tmp:
        config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
        config_dir.mkdir()
        data_dir.mkdir()
        result: dict[str, Any] = anyio.run(_measure, config_dir, data_dir, samples)
    result.update(samples=samples, mcp_sdk=metadata.version("mcp"))
    return result


async def _measure(config_dir: Path, data_dir: Path, samples: int) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from memhoncho.capture.host import Host
    from memhoncho.integrations.mcp import save
    from memhoncho.testing.processes import memhoncho_env

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memhoncho", "mcp", "--owner", OWNER, "--conversation", "via-mcp"],
        env=memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None),
    )
    saves: list[float] = []
    captures: list[float] = []
    pings: list[float] = []
    with Host(config_dir, data_dir) as host:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for i in range(WARMUP + samples):
                user, answer = _turn(i)
                start = time.perf_counter()
                await session.send_ping()
                pinged = time.perf_counter()
                saved = await session.call_tool("honcho_save", {"user": user, "assistant": answer})
                done = time.perf_counter()
                if saved.is_error or (saved.structured_content or {}).get("status") != "captured":
                    raise RuntimeError(f"the bench's save was not captured: {saved.content}")
                turn = [(save.USER, user), (save.ASSISTANT, answer)]
                event = save.run_event(OWNER, "in-process", f"bench-{i}", turn)
                began = time.perf_counter()
                captured = host.capture(event)
                ended = time.perf_counter()
                if str(captured.status) != "captured":
                    raise RuntimeError(f"the bench's capture was {captured.status}")
                if i >= WARMUP:
                    pings.append((pinged - start) * 1000)
                    saves.append((done - pinged) * 1000)
                    captures.append((ended - began) * 1000)
    save_fig, capture_fig = latency_figures(saves), latency_figures(captures)
    return {
        "turn_chars": USER_CHARS + ANSWER_CHARS,
        "mcp_save_stdio": save_fig,
        "host_capture_in_process": capture_fig,
        "mcp_ping_stdio": latency_figures(pings),
        "save_over_capture_p50": round(save_fig["p50_ms"] / capture_fig["p50_ms"], 2),
        "save_minus_capture_p50_ms": round(save_fig["p50_ms"] - capture_fig["p50_ms"], 3),
        "hints": "none: no API key, so both paths are the append and fsync",
    }
