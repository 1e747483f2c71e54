"""Which failed requests may have reached Honcho (``retry.py``'s table), as the SDK raises them:
its ``TimeoutError`` or ``ConnectionError`` with the httpx error as ``__cause__``."""

from __future__ import annotations

import httpx
import pytest
from honcho.http import exceptions as sdk

from memhoncho.errors import (
    HonchoRateLimited,
    HonchoRejected,
    HonchoTimeout,
    HonchoUnavailable,
    HonchoUnreachable,
    MemhonchoError,
)
from memhoncho.honcho import adapter
from memhoncho.honcho.retry import UNREACHABLE_RETRY_CAP_S


def _sdk(kind: type[sdk.HonchoError], cause: BaseException) -> BaseException:
    exc = kind("failed")
    exc.__cause__ = cause  # as the SDK's ``raise error from e``
    return exc


REFUSED = _sdk(sdk.ConnectionError, httpx.ConnectError("refused"))
# name, exception, memhoncho error class, never sent
CASES: list[tuple[str, BaseException, type[MemhonchoError], bool]] = [
    ("refused", REFUSED, HonchoUnreachable, True),
    ("connect-timeout", _sdk(sdk.TimeoutError, httpx.ConnectTimeout("x")), HonchoUnreachable, True),
    ("pool-timeout", _sdk(sdk.TimeoutError, httpx.PoolTimeout("busy")), HonchoUnreachable, True),
    ("raw-connect-error", httpx.ConnectError("refused"), HonchoUnreachable, True),
    ("write-timeout", _sdk(sdk.TimeoutError, httpx.WriteTimeout("slow")), HonchoTimeout, False),
    ("read-timeout", _sdk(sdk.TimeoutError, httpx.ReadTimeout("slow")), HonchoTimeout, False),
    ("write-error", _sdk(sdk.ConnectionError, httpx.WriteError("pipe")), HonchoUnavailable, False),
    ("read-error", _sdk(sdk.ConnectionError, httpx.ReadError("reset")), HonchoUnavailable, False),
    (
        "hung-up",
        _sdk(sdk.ConnectionError, httpx.RemoteProtocolError("x")),
        HonchoUnavailable,
        False,
    ),
    ("local", _sdk(sdk.ConnectionError, httpx.LocalProtocolError("x")), HonchoUnavailable, False),
    ("no-cause", sdk.TimeoutError("timed out"), HonchoTimeout, False),
    ("5xx", sdk.ServerError("boom", status=503), HonchoUnavailable, False),
    ("429", sdk.RateLimitError("slow down"), HonchoRateLimited, False),
    ("422", sdk.UnprocessableEntityError([{"loc": ["body"], "type": "x"}]), HonchoRejected, False),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("exc", "kind", "unsent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_only_a_connection_never_made_proves_a_request_never_reached_honcho(
    exc: BaseException, kind: type[MemhonchoError], unsent: bool
) -> None:
    decision = adapter.classify(exc, attempt=1)
    assert type(decision.error) is kind
    assert adapter.never_sent(exc) is unsent and decision.never_sent is unsent
    assert decision.unclear is (not unsent and kind is not HonchoRejected)
    assert adapter.proves_nothing_stored(exc) is (unsent or kind is HonchoRejected)


def test_a_request_that_never_reached_honcho_is_retried_soon_whatever_the_attempt() -> None:
    for attempt in (1, 5, 50):
        decision = adapter.classify(REFUSED, attempt)
        assert decision.retry and decision.delay_s is not None
        assert decision.delay_s <= UNREACHABLE_RETRY_CAP_S
    assert adapter.classify(REFUSED, 1).error.code == "ERR_HONCHO_UNREACHABLE"
