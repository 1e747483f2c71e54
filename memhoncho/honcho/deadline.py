"""One deadline for a whole Honcho request: the pool wait, connect, write and read together.

The SDK hands httpx its timeout as the limit of each phase, and httpx applies the read limit to
each socket read: a server that trickles its answer (a byte now and then) holds a request open
for ever, and even an honest one for four timeouts. The fence (``delivery/fence.py``) must know
when a send can no longer be under way, so the clients use ``DeadlineTransport``: each request
gets one deadline, its timeout after its start (sooner inside ``send_by``), and every socket
operation of it waits at most until then. Past it, the operation fails as its own phase's httpx
timeout, so the errors keep their meaning: a ``ConnectTimeout`` or ``PoolTimeout`` was never
sent, a ``WriteTimeout`` or ``ReadTimeout`` may have been (``retry.py``'s table).
"""

from __future__ import annotations

import ssl
import time
import typing
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import urlsplit

import httpcore
import httpx

#: Connections a client keeps (httpx's own defaults, spelled out).
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)

#: The running request's deadline (``time.monotonic()``), read by every socket operation.
_deadline: ContextVar[float | None] = ContextVar("memhoncho_request_deadline", default=None)
#: A caller's earlier end for the requests it makes (``send_by``), on the same clock.
_send_by: ContextVar[float | None] = ContextVar("memhoncho_send_by", default=None)


@contextmanager
def send_by(wall_time: float) -> Iterator[None]:
    """Requests made inside end by ``wall_time`` (a ``time.time()``) where their own deadline
    is later: the engine ends a send by its in-flight mark's start + the timeout, the instant
    the fence counts from."""
    token = _send_by.set(time.monotonic() + (wall_time - time.time()))
    try:
        yield
    finally:
        _send_by.reset(token)


class DeadlineTransport(httpx.BaseTransport):
    """An HTTP transport (httpcore's pool, as httpx's own) whose requests end by a deadline."""

    def __init__(self, limits: httpx.Limits = LIMITS, proxy: str | None = None) -> None:
        options: dict[str, typing.Any] = {
            "ssl_context": httpx.create_ssl_context(),
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "network_backend": _DeadlineBackend(httpcore.SyncBackend()),
        }
        self._pool: httpcore.ConnectionPool = (
            httpcore.HTTPProxy(proxy_url=proxy, **options)
            if proxy
            else httpcore.ConnectionPool(**options)
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        deadline = _deadline_of(request)
        extensions = dict(request.extensions)
        if deadline is not None:
            # the pool wait is bounded by httpcore itself: by what is left, no more
            left = max(deadline - time.monotonic(), 0.0)
            phases = dict(extensions.get("timeout") or {})
            phases["pool"] = left if phases.get("pool") is None else min(phases["pool"], left)
            extensions["timeout"] = phases
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=extensions,
        )
        with _within(deadline), _mapped(request):
            response = self._pool.handle_request(core_request)
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream, deadline, request),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


def environment_proxy(url: str) -> str | None:
    """The HTTP proxy the environment names for ``url`` (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``, less ``NO_PROXY``), as httpx's own client would take it: a transport of
    one's own turns httpx's lookup off, so the clients ask here."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _deadline_of(request: httpx.Request) -> float | None:
    """Now + the request's timeout (the SDK gives every phase the same one), or ``send_by``'s
    end where that is sooner; None when neither bounds it."""
    phases = request.extensions.get("timeout") or {}
    limits = [float(v) for v in phases.values() if v is not None]
    deadline = time.monotonic() + max(limits) if limits else None
    cap = _send_by.get()
    if cap is not None:
        deadline = cap if deadline is None else min(deadline, cap)
    return deadline


class _Body(httpx.SyncByteStream):
    """The answer's body, read under the request's deadline (httpx reads it after the
    transport returned)."""

    def __init__(
        self, stream: Iterable[bytes], deadline: float | None, request: httpx.Request
    ) -> None:
        self._stream, self._deadline, self._request = stream, deadline, request

    def __iter__(self) -> Iterator[bytes]:
        parts = iter(self._stream)
        while True:
            with _within(self._deadline), _mapped(self._request):
                part = next(parts, None)
            if part is None:
                return
            yield part

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _mapped(self._request):
                close()


@contextmanager
def _within(deadline: float | None) -> Iterator[None]:
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The phase's timeout, cut to what is left of the request's deadline; ``expired`` (the
    phase's own timeout error) when nothing is left."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads and writes wait no longer than the running request may."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # the handshake is part of connecting: nothing of the request is written yet
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own backend, its connections wrapped in ``_DeadlineStream``."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, left, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


#: httpcore's errors as httpx raises them (as httpx's own transport maps them): the most
#: specific first, so a ``ConnectTimeout`` stays one and is not taken for a ``TimeoutException``.
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _mapped(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _HTTPX_ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc), request=request) from exc
        raise
