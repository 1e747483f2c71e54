"""memhoncho: every agent conversation turn into Honcho, durably, in order, exactly once.

The host's API is ``Host``; see the README for the quick start. The names below load on first
use (PEP 562), so ``import memhoncho`` and the one-shot commands cost no more than they use:
honcho-ai, Celery, kombu and the Redis client load only when a call needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memhoncho.capture.host import Host
    from memhoncho.errors import MemhonchoError
    from memhoncho.models import CaptureResult, CaptureStatus

__all__ = ["CaptureResult", "CaptureStatus", "Host", "MemhonchoError"]
__version__ = "0.1.0"

_HOMES = {
    "CaptureResult": "memhoncho.models",
    "CaptureStatus": "memhoncho.models",
    "Host": "memhoncho.capture.host",
    "MemhonchoError": "memhoncho.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'memhoncho' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
