"""Retry is a value: one function turns any failure of a Honcho call into a ``RetryDecision``.

memhoncho owns retries (its clients use ``max_retries=0``), so this is the only retry policy:
exponential backoff with full jitter, capped, and Honcho's ``Retry-After`` wins when given.
The errors it builds name no API key, no message content and nothing the server echoed.

Whether a failed request may still land decides the fence (``delivery/fence.py``). Honcho has
no idempotency key, so only a request that provably never reached it is free of the fence.
With the SDK (``honcho-ai`` 2.7), a transport failure arrives as its ``TimeoutError`` or
``ConnectionError``, the httpx error as ``__cause__``:

=============================  =====================  ========================================
httpx error (``__cause__``)    memhoncho error        may it have reached Honcho?
=============================  =====================  ========================================
``ConnectError``               HonchoUnreachable      no: the connection was never made
                                                      (refused, no route, DNS, TLS handshake)
``ConnectTimeout``             HonchoUnreachable      no: still connecting when time ran out
``PoolTimeout``                HonchoUnreachable      no: no connection was ever handed to it
``WriteError``                 HonchoUnavailable      yes: some of the request was written
``WriteTimeout``               HonchoTimeout          yes: some of the request was written
``ReadError``                  HonchoUnavailable      yes: the request was sent; no answer read
``ReadTimeout``                HonchoTimeout          yes: sent, and perhaps being committed
``RemoteProtocolError``        HonchoUnavailable      yes: the server hung up after the request
anything else (local protocol  HonchoUnavailable /    yes: not proven otherwise
error, a status-0 SDK error)   HonchoFailure
an answer 429, 5xx, 408        RateLimited /          yes: a gateway may answer so for a
                               Unavailable / Timeout  request the server behind it committed
an answer 400, 422             HonchoRejected         no: refused whole before any row is
                                                      written (``proves_refusal``)
=============================  =====================  ========================================

``DeadlineTransport`` (``deadline.py``) fails a request at its deadline as the timeout of the
phase it is in, so the table holds for the deadline too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic
from honcho.http import exceptions as sdk

from memhoncho.errors import (
    HonchoFailure,
    HonchoNoLLM,
    HonchoRateLimited,
    HonchoRejected,
    HonchoTimeout,
    HonchoUnavailable,
    HonchoUnreachable,
    MemhonchoError,
)

BACKOFF_BASE_S = 1.0  # seconds: the ceiling of the first retry's delay
BACKOFF_CAP_S = 300.0  # seconds: no computed delay is longer
RETRY_AFTER_CAP_S = 3600.0  # seconds: a longer Retry-After is clamped to this
#: seconds: the longest delay after a request that never reached Honcho. Trying again costs
#: Honcho nothing (a refused connect), and the retry is what notices it is back.
UNREACHABLE_RETRY_CAP_S = 5.0
#: The httpx errors that prove a request never reached Honcho (the table above).
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: What a server without an OpenAI key says when asked to embed (HONCHO.md).
NO_LLM_MARKERS = ("api key is required", "openai")

_STATUS_WORDS = {
    400: "bad request",
    401: "authentication failed",
    403: "permission denied",
    404: "not found",
    409: "conflict",
    422: "validation failed",
    429: "rate limited",
}


@dataclass(frozen=True)
class RetryDecision:
    """What to do after a failed Honcho call.

    ``retry``: try again (after ``delay_s`` seconds). ``unclear``: the call may have been
    applied even so (a timeout, a dropped connection, a 5xx), so before resending a write,
    ask Honcho what it already holds. ``error``: the memhoncho error to report or raise.
    ``never_sent``: the request provably never reached Honcho (nothing of it can land).
    """

    retry: bool
    delay_s: float | None
    unclear: bool
    error: MemhonchoError
    never_sent: bool = False


def backoff_s(
    attempt: int, rng: random.Random | None = None, cap_s: float = BACKOFF_CAP_S
) -> float:
    """Full-jitter exponential backoff for the ``attempt``-th failure (1 = the first)."""
    ceiling = min(cap_s, BACKOFF_BASE_S * 2 ** min(max(attempt - 1, 0), 64))
    return (rng or random).uniform(0.0, ceiling)


def classify(exc: BaseException, attempt: int) -> RetryDecision:
    """Decide about ``exc``, raised by a Honcho call on its ``attempt``-th try (1-based)."""
    error = translate(exc)
    if not isinstance(error, HonchoFailure):
        return RetryDecision(retry=False, delay_s=None, unclear=False, error=error)
    unclear = bool(error.details.get("unclear"))
    if isinstance(error, HonchoUnreachable):
        soon = backoff_s(attempt, cap_s=UNREACHABLE_RETRY_CAP_S)
        return RetryDecision(retry=True, delay_s=soon, unclear=False, error=error, never_sent=True)
    if isinstance(error, HonchoRateLimited):
        delay = error.retry_after_s
        if delay is None:
            delay = backoff_s(attempt)
        return RetryDecision(retry=True, delay_s=delay, unclear=unclear, error=error)
    if isinstance(error, HonchoUnavailable | HonchoTimeout):
        return RetryDecision(retry=True, delay_s=backoff_s(attempt), unclear=unclear, error=error)
    return RetryDecision(retry=False, delay_s=None, unclear=unclear, error=error)


#: The statuses that prove a write stored nothing: Honcho refused the request as a whole
#: (validation runs before any row is written). Nothing else does: a 429 or a 5xx may come
#: from a gateway after the server committed, and a timeout or a dropped connection from
#: anywhere, so after any other failure the write is reconciled before it is sent again.
REFUSAL_STATUSES = frozenset({400, 422})


def proves_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` proves its write stored nothing (only a 400 or a 422 does)."""
    error = translate(exc)
    return isinstance(error, HonchoRejected) and error.status in REFUSAL_STATUSES


def never_sent(exc: BaseException) -> bool:
    """Whether ``exc`` proves its request never reached Honcho (the table above)."""
    return isinstance(translate(exc), HonchoUnreachable)


def proves_nothing_stored(exc: BaseException) -> bool:
    """Whether a failed write provably stored nothing: refused whole, or never sent."""
    return proves_refusal(exc) or never_sent(exc)


def translate(exc: BaseException) -> MemhonchoError:
    """The memhoncho error for any exception a Honcho call raised (memhoncho's own pass)."""
    if isinstance(exc, MemhonchoError):
        return exc
    name = type(exc).__name__
    transport = exc.__cause__ if isinstance(exc, sdk.TimeoutError | sdk.ConnectionError) else exc
    if isinstance(transport, NEVER_SENT):
        return HonchoUnreachable(
            "Honcho could not be reached; the request was never sent",
            sdk_error=name,
            transport_error=type(transport).__name__,
            unclear=False,
        )
    if isinstance(exc, sdk.RateLimitError):
        after = exc.retry_after
        if after is not None:
            after = min(max(after, 0.0), RETRY_AFTER_CAP_S)
        # unclear: a gateway may answer 429 for a request the server behind it committed
        return HonchoRateLimited(
            "Honcho rate-limited the call (429)",
            status=429,
            retry_after_s=after,
            sdk_error=name,
            unclear=True,
        )
    if isinstance(exc, sdk.ServerError):
        return HonchoUnavailable(
            f"Honcho answered with a server error ({exc.status})",
            status=exc.status,
            sdk_error=name,
            unclear=True,
        )
    if isinstance(exc, sdk.TimeoutError):
        return HonchoTimeout("Honcho did not answer in time", sdk_error=name, unclear=True)
    if isinstance(exc, sdk.ConnectionError):
        return HonchoUnavailable(
            "Honcho dropped the connection, or it failed mid-request", sdk_error=name, unclear=True
        )
    if isinstance(exc, sdk.APIError):
        return _rejected(exc)
    if isinstance(exc, sdk.HonchoError):  # status 0, not a known kind: treat as transport
        return HonchoUnavailable("Honcho call failed", sdk_error=name, unclear=True)
    if isinstance(exc, httpx.TimeoutException):
        return HonchoTimeout("Honcho did not answer in time", sdk_error=name, unclear=True)
    if isinstance(exc, httpx.HTTPStatusError):
        return _from_status(exc.response.status_code, name)
    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError):
        return HonchoUnavailable(
            "Honcho dropped the connection, or it failed mid-request", sdk_error=name, unclear=True
        )
    if isinstance(exc, pydantic.ValidationError | ValueError | TypeError):
        # The SDK refused the call before sending it: nothing reached Honcho.
        return HonchoRejected(
            "The Honcho SDK refused the call's arguments before sending", sdk_error=name
        )
    return HonchoFailure(
        f"Unexpected failure calling Honcho ({name})", sdk_error=name, unclear=True
    )


@contextmanager
def translated() -> Iterator[None]:
    """Let only memhoncho errors out; the SDK's own (which may echo content) stay inside."""
    try:
        yield
    except MemhonchoError:
        raise
    except Exception as exc:  # every SDK failure is mapped; none escapes raw
        raise translate(exc) from None


def _rejected(exc: sdk.APIError) -> MemhonchoError:
    name = type(exc).__name__
    if exc.status == 422 and _says_no_llm(exc.message):
        return HonchoNoLLM(
            "Honcho cannot do this without an LLM or embeddings configured",
            status=422,
            sdk_error=name,
        )
    details: dict[str, Any] = {"sdk_error": name}
    if exc.status == 422:
        fields = _invalid_fields(exc.message)
        if fields:
            details["fields"] = fields
    if exc.status == 408:
        return HonchoTimeout(
            "Honcho timed out the request (408)", status=408, unclear=True, **details
        )
    word = _STATUS_WORDS.get(exc.status, "refused")
    return HonchoRejected(
        f"Honcho refused the call ({exc.status}, {word})", status=exc.status, **details
    )


def _from_status(status: int, name: str) -> MemhonchoError:
    if status == 429:
        return HonchoRateLimited(
            "Honcho rate-limited the call (429)", status=429, sdk_error=name, unclear=True
        )
    if status >= 500:
        return HonchoUnavailable(
            f"Honcho answered with a server error ({status})",
            status=status,
            sdk_error=name,
            unclear=True,
        )
    word = _STATUS_WORDS.get(status, "refused")
    return HonchoRejected(
        f"Honcho refused the call ({status}, {word})", status=status, sdk_error=name
    )


def _says_no_llm(message: Any) -> bool:
    text = message if isinstance(message, str) else ""
    return any(marker in text.lower() for marker in NO_LLM_MARKERS)


def _invalid_fields(message: Any) -> list[str]:
    """The locations and kinds of a FastAPI 422, never its ``msg`` or echoed ``input``."""
    if not isinstance(message, list):
        return []
    fields = []
    for item in message[:20]:
        if isinstance(item, dict):
            loc = ".".join(str(part) for part in item.get("loc", []))
            fields.append(f"{loc}:{item.get('type', '?')}")
    return fields
