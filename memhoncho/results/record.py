"""What the results remember of one task name, and an error as an operator may see it.

An error is recorded as its ``MemhonchoError`` code and message (which never carry a key or
content) or, for anything else, only its type name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from memhoncho.errors import MemhonchoError

BEAT_STALE_S = 60.0  # a heartbeat older than this is a beat (or worker) that is gone
MAX_MESSAGE_CHARS = 300  # of an error message kept


def live_worker(value: Any, now: float) -> list[str] | None:
    """The queues of a worker heartbeat that is fresh, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("at"), int | float):
        return None
    if now - float(value["at"]) > BEAT_STALE_S:
        return None
    return [str(q) for q in value.get("queues") or []]


@dataclass
class TaskResult:
    """What one task name has done. Times are Unix seconds; None means never."""

    name: str
    last_start_at: float | None = None
    last_success_at: float | None = None
    last_error_at: float | None = None
    last_error_type: str | None = None
    last_error_code: str | None = None
    last_error_message: str | None = None
    consecutive_failures: int = 0  #: failures and retries since the last success
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_fields(cls, name: str, raw: dict[str, Any]) -> TaskResult:
        """From stored strings or values; unknown or unparsable fields are ignored."""
        result = cls(name=name)
        for spec in fields(cls):
            if spec.name == "name" or spec.name not in raw or raw[spec.name] in (None, ""):
                continue
            value = raw[spec.name]
            try:
                if spec.name.endswith("_at"):
                    setattr(result, spec.name, float(value))
                elif spec.type in ("int", int):
                    setattr(result, spec.name, int(value))
                else:
                    setattr(result, spec.name, str(value))
            except (TypeError, ValueError):
                continue
        return result


@dataclass(frozen=True)
class ErrorSummary:
    """An error as it may be shown to an operator: no secret, no content."""

    type: str
    code: str | None
    message: str | None

    @classmethod
    def of(cls, exc: BaseException | object) -> ErrorSummary:
        if isinstance(exc, MemhonchoError):
            return cls(type(exc).__name__, exc.code, exc.message[:MAX_MESSAGE_CHARS])
        return cls(type(exc).__name__, None, None)

    def fields_at(self, at: float) -> dict[str, Any]:
        """The ``TaskResult`` fields this error sets when it happened at ``at``."""
        return {
            "last_error_at": at,
            "last_error_type": self.type,
            "last_error_code": self.code or "",
            "last_error_message": self.message or "",
        }
