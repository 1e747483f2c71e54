"""The process's Honcho clients: which Honcho (``HonchoTarget``), one client per purpose.

Clients are built lazily per process (never at import time, never shared across a fork) with
``max_retries=0``: memhoncho owns retries (``retry.py``). Their HTTP goes through
``DeadlineTransport``: the timeout bounds each request as a whole (``deadline.py``), and
``statuses`` shows the HTTP statuses the SDK's return values leave out.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx
from honcho import Honcho

from memhoncho.honcho.deadline import DeadlineTransport, environment_proxy


@dataclass(frozen=True)
class HonchoTarget:
    """Which Honcho, as whom, in which workspace. The key never shows in its repr."""

    base_url: str
    api_key: str = field(repr=False)
    workspace_id: str
    timeout_s: float = 30.0


#: the statuses of the answers to the requests made inside ``statuses()`` (None outside one)
_statuses: ContextVar[list[int] | None] = ContextVar("memhoncho_statuses", default=None)


@contextmanager
def statuses() -> Iterator[list[int]]:
    """The HTTP statuses answered to this context's requests made inside, in order.

    Only the clients built here report them; another client's requests leave the list
    empty, so a caller must read an empty list as "not known".
    """
    seen: list[int] = []
    token = _statuses.set(seen)
    try:
        yield seen
    finally:
        _statuses.reset(token)


def _note_status(response: httpx.Response) -> None:
    seen = _statuses.get()
    if seen is not None:
        seen.append(response.status_code)


_clients_lock = threading.Lock()
_clients: dict[tuple[Any, ...], tuple[HonchoTarget, Honcho, httpx.Client]] = {}
_clients_pid: int | None = None


def write_client(target: HonchoTarget) -> Honcho:
    """The process's client for writes: ``max_retries=0``, since memhoncho owns retries."""
    return _client("write", target, target.timeout_s)


def read_client(target: HonchoTarget, timeout_s: float | None = None) -> Honcho:
    """The process's client for reads (also ``max_retries=0``), with its own timeout."""
    return _client("read", target, timeout_s if timeout_s is not None else target.timeout_s)


def _client(kind: str, target: HonchoTarget, timeout_s: float) -> Honcho:
    # One client per process and purpose: rebuilt after a fork (a child must not share
    # the parent's connections) and when the target changes (a key rotated live).
    global _clients_pid
    slot = (kind, target.base_url, target.workspace_id, timeout_s)
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients.clear()  # the parent's: dropped, never closed from here
            _clients_pid = os.getpid()
        cached = _clients.get(slot)
        if cached is not None and cached[0] == target:
            return cached[1]
        # The SDK builds full URLs itself and gives every request this timeout.
        transport = DeadlineTransport(proxy=environment_proxy(target.base_url))
        http = httpx.Client(
            transport=transport, timeout=timeout_s, event_hooks={"response": [_note_status]}
        )
        client = Honcho(
            api_key=target.api_key,
            base_url=target.base_url,
            workspace_id=target.workspace_id,
            timeout=timeout_s,
            max_retries=0,
            http_client=http,
        )
        _clients[slot] = (target, client, http)
    if cached is not None:
        _close(cached[2])
    return client


def close_clients() -> None:
    """Close this process's cached clients (worker shutdown, tests); new ones build lazily."""
    with _clients_lock:
        stale = [http for _, _, http in _clients.values()] if _clients_pid == os.getpid() else []
        _clients.clear()
    for http in stale:
        _close(http)


def _close(http: httpx.Client) -> None:
    try:
        http.close()  # the SDK closes only a client it built itself
    except Exception:  # closing a stale client must never fail a call
        pass
