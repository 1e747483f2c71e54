"""The word a capture's answer gives for its delivery hint (``CaptureResult.hint``), decided here
once: ``memhoncho capture`` prints it, the MCP save answers it, the integrations log it. A word
in ``STALLED`` means nothing moves until something changes (a key, the broker)."""

from __future__ import annotations

from memhoncho.models import CaptureResult, CaptureStatus, HintOutcome

#: nothing moves until an API key is configured, or until the broker answers again (the relay
#: or the sweep publishes then): a host should say so once, not at every capture
STALLED = frozenset({HintOutcome.NO_KEY, HintOutcome.BROKER_DOWN})


def hint_word(result: CaptureResult) -> str | None:
    """What became of a captured run's delivery hint (``no-key``, ``broker-down``, ``relay``,
    ``waiting``, ``published``), or None when nothing was captured (a duplicate, ...)."""
    if result.status is not CaptureStatus.CAPTURED or result.hint is HintOutcome.NONE:
        return None
    return result.hint.value


def stalled(word: str | None) -> bool:
    """Whether ``word`` says that nothing will move until a key or the broker is back."""
    return word in STALLED


def unsent(*, publishing: bool, hinting: bool, relayed: bool, keyed: bool) -> HintOutcome:
    """The word for a PostgreSQL capture that published no hint: one waits (``publishing``: the
    store claimed nothing), it was left to the relay (``relayed``), or, on a host that publishes
    its own (``hinting``), no key or the broker known down (left to the relay too)."""
    if publishing:
        return HintOutcome.WAITING
    if not hinting:
        return HintOutcome.RELAY if relayed else HintOutcome.WAITING
    return HintOutcome.BROKER_DOWN if keyed else HintOutcome.NO_KEY


def confirmed(outcome: HintOutcome, enqueued: bool) -> HintOutcome:
    """A publish that failed, or got no answer in time, is ``broker-down``, not ``published``."""
    if outcome is HintOutcome.PUBLISHED and not enqueued:
        return HintOutcome.BROKER_DOWN
    return outcome
