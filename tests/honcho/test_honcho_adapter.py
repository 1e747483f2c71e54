"""memhoncho.honcho.adapter: classify() and the errors it makes, over the real SDK's errors (the
typed operations against the stand-in: ``test_honcho_operations.py``)."""

from __future__ import annotations

import json
import random

import httpx
import pydantic
import pytest
from honcho.http import exceptions as sdk

from memhoncho.errors import (
    HonchoFailure,
    HonchoNoLLM,
    HonchoRateLimited,
    HonchoRejected,
    HonchoTimeout,
    HonchoUnavailable,
    HonchoUnreachable,
    LockBusy,
    MemhonchoError,
)
from memhoncho.honcho import adapter
from memhoncho.honcho.adapter import HonchoTarget, OutgoingMessage
from memhoncho.honcho.retry import BACKOFF_BASE_S, BACKOFF_CAP_S, RETRY_AFTER_CAP_S
from memhoncho.testing import HonchoStandIn

SECRET_KEY = "sk-memhoncho-test-SECRET-9f8e7d"
SECRET_CONTENT = "my bank PIN is 4321 "


def _with_cause(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


def _validation_error() -> pydantic.ValidationError:
    try:
        pydantic.TypeAdapter(int).validate_python("not a number")
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


REQUEST = httpx.Request("POST", "http://honcho.invalid/v3/workspaces")

# exception, memhoncho error class, retry, unclear
CASES: list[tuple[str, BaseException, type[MemhonchoError], bool, bool]] = [
    ("429", sdk.RateLimitError("slow down", retry_after=7.0), HonchoRateLimited, True, True),
    ("500", sdk.ServerError("boom", status=500), HonchoUnavailable, True, True),
    ("503", sdk.ServerError("down", status=503), HonchoUnavailable, True, True),
    ("timeout", sdk.TimeoutError("Request timed out after 5s"), HonchoTimeout, True, True),
    (
        "connect-refused",
        _with_cause(sdk.ConnectionError("refused"), httpx.ConnectError("refused")),
        HonchoUnreachable,
        True,
        False,
    ),
    (
        "connection-dropped",
        _with_cause(sdk.ConnectionError("dropped"), httpx.RemoteProtocolError("gone")),
        HonchoUnavailable,
        True,
        True,
    ),
    ("400", sdk.BadRequestError("bad"), HonchoRejected, False, False),
    ("401", sdk.AuthenticationError("who"), HonchoRejected, False, False),
    ("403", sdk.PermissionDeniedError("no"), HonchoRejected, False, False),
    ("404", sdk.NotFoundError("Session not found"), HonchoRejected, False, False),
    ("409", sdk.ConflictError("conflict"), HonchoRejected, False, False),
    (
        "422",
        sdk.UnprocessableEntityError([{"loc": ["body"], "type": "x"}]),
        HonchoRejected,
        False,
        False,
    ),  # type: ignore[arg-type]
    (
        "422-no-llm",
        sdk.UnprocessableEntityError("OpenAI API key is required"),
        HonchoNoLLM,
        False,
        False,
    ),
    ("418", sdk.APIError("teapot", status=418), HonchoRejected, False, False),
    ("status-0", sdk.HonchoError("odd"), HonchoUnavailable, True, True),
    ("httpx-read-timeout", httpx.ReadTimeout("slow", request=REQUEST), HonchoTimeout, True, True),
    (
        "httpx-connect-timeout",
        httpx.ConnectTimeout("x", request=REQUEST),
        HonchoUnreachable,
        True,
        False,
    ),
    (
        "httpx-connect-error",
        httpx.ConnectError("x", request=REQUEST),
        HonchoUnreachable,
        True,
        False,
    ),
    (
        "httpx-protocol",
        httpx.RemoteProtocolError("x", request=REQUEST),
        HonchoUnavailable,
        True,
        True,
    ),
    (
        "httpx-status-502",
        httpx.HTTPStatusError("x", request=REQUEST, response=httpx.Response(502, request=REQUEST)),
        HonchoUnavailable,
        True,
        True,
    ),
    ("pydantic", _validation_error(), HonchoRejected, False, False),
    (
        "value-error",
        ValueError("Message content cannot be only whitespace"),
        HonchoRejected,
        False,
        False,
    ),
    ("builtin-connection", ConnectionResetError("reset"), HonchoUnavailable, True, True),
]


@pytest.mark.parametrize(
    ("exc", "kind", "retry", "unclear"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_classify_maps_every_sdk_error_to_a_memhoncho_decision(
    exc: BaseException, kind: type[MemhonchoError], retry: bool, unclear: bool
) -> None:
    decision = adapter.classify(exc, attempt=1)
    assert type(decision.error) is kind
    assert (decision.retry, decision.unclear) == (retry, unclear)
    assert (decision.delay_s is not None) == retry


def test_only_a_400_or_a_422_proves_a_write_stored_nothing() -> None:
    refusals = {name for name, exc, *_ in CASES if adapter.proves_refusal(exc)}
    assert refusals == {"400", "422"}


def test_classify_honours_retry_after_over_backoff() -> None:
    decision = adapter.classify(sdk.RateLimitError(retry_after=42.0), attempt=9)
    assert decision.delay_s == 42.0
    assert decision.error.retry_after_s == 42.0  # type: ignore[attr-defined]
    huge = adapter.classify(sdk.RateLimitError(retry_after=1e9), attempt=1)
    assert huge.delay_s == RETRY_AFTER_CAP_S


def test_classify_backs_off_exponentially_with_full_jitter_and_a_cap() -> None:
    for attempt in range(1, 20):
        ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
        delays = [adapter.classify(sdk.ServerError(), attempt).delay_s for _ in range(50)]
        assert all(d is not None and 0.0 <= d <= ceiling for d in delays)
    assert adapter.backoff_s(30, random.Random(1)) <= BACKOFF_CAP_S
    no_header = adapter.classify(sdk.RateLimitError(), attempt=3)
    assert no_header.delay_s is not None and 0 <= no_header.delay_s <= 4 * BACKOFF_BASE_S


def test_classify_passes_memhoncho_errors_through() -> None:
    busy = LockBusy()
    assert adapter.classify(busy, 1).error is busy and not adapter.classify(busy, 1).retry
    timeout = HonchoTimeout(unclear=True)
    decision = adapter.classify(timeout, 2)
    assert decision.error is timeout and decision.retry and decision.unclear


def test_classify_gives_up_on_the_unexpected_but_calls_it_unclear() -> None:
    decision = adapter.classify(RuntimeError("bug"), 1)
    assert type(decision.error) is HonchoFailure
    assert not decision.retry and decision.unclear


def test_the_target_never_shows_its_key() -> None:
    target = HonchoTarget(base_url="http://h", api_key=SECRET_KEY, workspace_id="w")
    assert SECRET_KEY not in repr(target) and SECRET_KEY not in str(target)


def _error_text(error: MemhonchoError) -> str:
    return " ".join([str(error), repr(error), json.dumps(error.as_dict(), default=str)])


def test_errors_never_carry_the_key_or_the_content(workspace_id: str) -> None:
    with HonchoStandIn(api_key="the-right-key") as standin:
        wrong = HonchoTarget(standin.url, SECRET_KEY, workspace_id)
        with pytest.raises(HonchoRejected) as refused:
            adapter.ensure_session(adapter.write_client(wrong), "s1", "ana", "agent")
        assert refused.value.status == 401
        assert SECRET_KEY not in _error_text(refused.value)

        right = adapter.write_client(HonchoTarget(standin.url, "the-right-key", workspace_id))
        too_long = OutgoingMessage("ana", SECRET_CONTENT * 2000)
        with pytest.raises(HonchoRejected) as invalid:
            adapter.add_messages(right, "s1", [too_long])
        assert SECRET_CONTENT.strip() not in _error_text(invalid.value)
        assert invalid.value.details["fields"] == ["body.messages.0.content:string_too_long"]
        assert invalid.value.__suppress_context__ and invalid.value.__cause__ is None
