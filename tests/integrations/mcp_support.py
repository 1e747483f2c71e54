"""What the MCP tests share: ``memhoncho mcp`` started as a real process and driven with the
``mcp`` SDK's own clients (stdio, and streamable HTTP with headers), and looks at the store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.integrations.mcp import scope
from memhoncho.models import Snapshot
from memhoncho.testing.ports import free_port
from memhoncho.testing.processes import memhoncho_env, terminate, wait_until

MEMHONCHO = [sys.executable, "-m", "memhoncho"]
HTTP_START_S = 60.0  # seconds the HTTP server may take to listen (a loaded machine)


def server_env(config_dir: Path, data_dir: Path) -> dict[str, str]:
    """The server's environment: these folders, the settings file's key (none of ours)."""
    return memhoncho_env(config_dir=config_dir, data_dir=data_dir, api_key=None)


@asynccontextmanager
async def stdio_session(
    config_dir: Path, data_dir: Path, *options: str
) -> AsyncIterator[ClientSession]:
    """A ``memhoncho mcp`` process over stdio, as a desktop client starts it, initialized."""
    params = StdioServerParameters(
        command=MEMHONCHO[0],
        args=[*MEMHONCHO[1:], "mcp", *options],
        env=server_env(config_dir, data_dir),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextmanager
def http_server(config_dir: Path, data_dir: Path, *options: str) -> Iterator[str]:
    """A ``memhoncho mcp --http`` process on a free port; yields its URL, stops it after."""
    port = free_port()
    process = subprocess.Popen(
        [*MEMHONCHO, "mcp", "--http", f"127.0.0.1:{port}", *options],
        env=server_env(config_dir, data_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _listening(port, process), "the MCP HTTP server", HTTP_START_S)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        terminate(process, timeout_s=20)
        assert process.stderr is not None
        process.stderr.close()


def _listening(port: int, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        assert process.stderr is not None
        raise AssertionError(f"memhoncho mcp --http exited: {process.stderr.read().decode()}")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """The SDK's streamable HTTP client, its bearer token in the headers, initialized."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as client,
        streamable_http_client(url, http_client=client) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def records(config_dir: Path, data_dir: Path, owner: str | None, conversation: str) -> list[Any]:
    """The outbox records of ``owner``'s ``conversation`` (as the MCP server stores it)."""
    key = ids.conversation_key(scope.scoped(owner, conversation))
    return list(Deployment(config_dir, data_dir).store().records(key))


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time: what "nothing was
    written" compares."""
    found: dict[str, tuple[int, int]] = {}
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (st.st_size, st.st_mtime_ns)
    return found


def refusal(result: Any) -> dict[str, Any]:
    """The memhoncho error a tool call answered (it must have answered one)."""
    assert result.is_error, result
    error = dict(result.structured_content["error"])
    assert result.content[0].text == f"{error['code']}: {error['message']}"
    return error


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


def wait_for(check: Any, what: str, timeout_s: float = 240.0) -> Any:
    return wait_until(check, what, timeout_s, poll_s=0.25)


def write_scoped_snapshot(
    deployment: Deployment, owner: str, conversation: str, representation: str, **extra: Any
) -> str:
    """The local snapshot of ``owner``'s ``conversation`` as a refresh writes it (``extra``:
    more of its fields); the scoped conversation id it is stored under."""
    stored = scope.scoped(owner, conversation)
    snapshot = Snapshot(
        conversation_id=stored,
        workspace_id="memhoncho",
        user_peer_id=ids.peer_id(owner),
        agent_peer_id="agent",
        representation=representation,
        context_tokens=2000,
        fetched_at=time.time(),
        **extra,
    )
    deployment.store().write_snapshot(ids.conversation_key(stored), snapshot)
    return stored
