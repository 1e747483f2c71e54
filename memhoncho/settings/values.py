"""Checks of single setting values that the layers using them share: what kind of server a
URL names (the results, the status view, the Celery edge) and whether a redaction pattern is
usable (capture). They live with the settings, at the ground, so those layers import down."""

from __future__ import annotations

import re

MAX_PATTERN_LEN = 1000  # characters of one extra pattern (a setting, not a program)


def is_redis(url: str | None) -> bool:
    """Whether a broker URL names Redis (else the embedded filesystem broker or another)."""
    return bool(url) and str(url).startswith(("redis://", "rediss://", "unix://"))


def broker_kind(url: str | None) -> str:
    """``embedded`` (no URL), ``redis``, ``rabbitmq``, or ``other``: the words status and
    doctor use for a broker."""
    if not url:
        return "embedded"
    if is_redis(url):
        return "redis"
    return "rabbitmq" if is_amqp(url) else "other"


def is_amqp(url: str | None) -> bool:
    """Whether a broker URL names RabbitMQ (AMQP 0-9-1: ``amqp://``, ``amqps://``, ``pyamqp://``)."""
    return bool(url) and str(url).startswith(("amqp://", "amqps://", "pyamqp://"))


def check_pattern(pattern: object) -> str:
    """``pattern`` if it compiles as a redaction pattern; ValueError saying why otherwise.

    The reason names the regex error only (a pattern may itself hold part of a secret).
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a redaction pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_LEN:
        raise ValueError(f"a redaction pattern must be at most {MAX_PATTERN_LEN} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc.msg})") from None
    if compiled.match(""):
        raise ValueError("a redaction pattern must not match the empty string")
    return pattern
