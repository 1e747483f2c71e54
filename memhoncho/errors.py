"""memhoncho's one error tree.

Every error has a stable ``code`` the host can branch on and a message that names
no secret, no message content and no other user's id. The class docstring is the
default message.

    MemhonchoError                      ERR_MEMHONCHO
    ├── InvalidInput                    ERR_INVALID_INPUT
    │   ├── InvalidEvent                ERR_INVALID_EVENT
    │   ├── InvalidId                   ERR_INVALID_ID
    │   ├── CaptureTooLarge             ERR_CAPTURE_TOO_LARGE
    │   ├── RunConflict                 ERR_RUN_CONFLICT
    │   ├── InvalidToolCall             ERR_TOOL_ARGUMENTS
    │   ├── ForkRefused                 ERR_FORK_REFUSED
    │   ├── UnmappableMessage           ERR_FRAMEWORK_MESSAGE
    │   ├── ImportUnreadable            ERR_IMPORT_UNREADABLE
    │   └── ImportFormat                ERR_IMPORT_FORMAT
    ├── OutboxCapacity                  ERR_OUTBOX_CAPACITY
    ├── StoreError                      ERR_STORE
    │   ├── CorruptFile                 ERR_CORRUPT_FILE
    │   ├── StorePermission             ERR_STORE_PERMISSION
    │   ├── StoreUnavailable            ERR_STORE_UNAVAILABLE
    │   └── StoreSchemaBehind           ERR_STORE_SCHEMA
    ├── ConfigError                     ERR_CONFIG
    │   ├── MissingApiKey               ERR_NO_API_KEY
    │   └── NotInitialised              ERR_NOT_INITIALISED
    ├── LockBusy                        ERR_LOCK_BUSY
    │   ├── ForkWaiting                 ERR_FORK_WAITING
    │   └── InFlightSettling            ERR_IN_FLIGHT_SETTLING
    ├── TaskRefused                     ERR_TASK_REFUSED
    ├── RecallBusy                      ERR_RECALL_BUSY
    └── HonchoFailure                   ERR_HONCHO
        ├── HonchoUnavailable           ERR_HONCHO_UNAVAILABLE
        │   └── HonchoUnreachable       ERR_HONCHO_UNREACHABLE
        ├── HonchoRateLimited           ERR_HONCHO_RATE_LIMITED
        ├── HonchoRejected              ERR_HONCHO_REJECTED
        ├── HonchoTimeout               ERR_HONCHO_TIMEOUT
        └── HonchoNoLLM                 ERR_HONCHO_NO_LLM
"""

from __future__ import annotations

from typing import Any, ClassVar


class MemhonchoError(Exception):
    """memhoncho failed."""

    code: ClassVar[str] = "ERR_MEMHONCHO"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The error as the host or the model may be shown it."""
        return {"code": self.code, "message": self.message, **self.details}


class InvalidInput(MemhonchoError):
    """The input was refused; nothing was changed."""

    code = "ERR_INVALID_INPUT"


class InvalidEvent(InvalidInput):
    """The captured run is malformed; nothing was written."""

    code = "ERR_INVALID_EVENT"


class InvalidId(InvalidInput):
    """The id cannot be mapped safely to a file name and a Honcho id."""

    code = "ERR_INVALID_ID"


class CaptureTooLarge(InvalidInput):
    """The run is larger than the capture ceiling; nothing was written."""

    code = "ERR_CAPTURE_TOO_LARGE"


class RunConflict(InvalidInput):
    """The run id was already captured in this conversation with other content; nothing was
    written (the same content again is a duplicate, not a conflict)."""

    code = "ERR_RUN_CONFLICT"


class InvalidToolCall(InvalidInput):
    """The tool call's name or arguments are invalid."""

    code = "ERR_TOOL_ARGUMENTS"


class ForkRefused(InvalidInput):
    """The fork was refused: the child already has a fork record or a Honcho session."""

    code = "ERR_FORK_REFUSED"


class UnmappableMessage(InvalidInput):
    """An agent framework's message has a shape memhoncho's integration cannot map to a run;
    nothing was written."""

    code = "ERR_FRAMEWORK_MESSAGE"


class ImportUnreadable(InvalidInput):
    """The export cannot be read (missing, not a zip, not JSON); nothing was imported from it."""

    code = "ERR_IMPORT_UNREADABLE"


class ImportFormat(InvalidInput):
    """The export's shape is none memhoncho knows (or not the one ``--format`` named)."""

    code = "ERR_IMPORT_FORMAT"


class OutboxCapacity(MemhonchoError):
    """The conversation has too many undelivered batches; nothing was written."""

    code = "ERR_OUTBOX_CAPACITY"


class StoreError(MemhonchoError):
    """A local store file could not be read or written."""

    code = "ERR_STORE"


class CorruptFile(StoreError):
    """A local store file is corrupt."""

    code = "ERR_CORRUPT_FILE"


class StorePermission(StoreError):
    """The store refused the write for good: permission denied, or a read-only file system."""

    code = "ERR_STORE_PERMISSION"


class StoreUnavailable(StoreError):
    """The store's database cannot be reached; nothing was written."""

    code = "ERR_STORE_UNAVAILABLE"


class StoreSchemaBehind(StoreError):
    """The store's database schema is not the one this memhoncho needs: run memhoncho db upgrade."""

    code = "ERR_STORE_SCHEMA"


class ConfigError(MemhonchoError):
    """memhoncho is not configured well enough for this call."""

    code = "ERR_CONFIG"


class MissingApiKey(ConfigError):
    """No Honcho API key is configured (secrets.json section api-key, or MEMHONCHO_API_KEY)."""

    code = "ERR_NO_API_KEY"


class NotInitialised(ConfigError):
    """The data directory is not an initialised memhoncho data directory (a mistyped
    --data-dir?): nothing was written. Initialise it with memhoncho init (capture: --init)."""

    code = "ERR_NOT_INITIALISED"


class LockBusy(MemhonchoError):
    """Another worker holds this conversation's lock; try again shortly."""

    code = "ERR_LOCK_BUSY"


class ForkWaiting(LockBusy):
    """The fork's parent has not delivered up to the fork point yet; try again shortly."""

    code = "ERR_FORK_WAITING"


class InFlightSettling(LockBusy):
    """A send whose outcome is unclear may still land in Honcho; try again when it cannot."""

    code = "ERR_IN_FLIGHT_SETTLING"

    def __init__(self, message: str | None = None, *, wait_s: float = 0.0, **details: Any) -> None:
        super().__init__(message, wait_s=round(wait_s, 3), **details)
        self.wait_s = wait_s  #: seconds until the fence opens


class TaskRefused(MemhonchoError):
    """A recall task whose proof is not the deployment's was refused (worker/task_proof.py)."""

    code = "ERR_TASK_REFUSED"


class RecallBusy(MemhonchoError):
    """Too many memory questions are in flight; nothing was asked, ask again shortly."""

    code = "ERR_RECALL_BUSY"


class HonchoFailure(MemhonchoError):
    """memhoncho could not complete the call to Honcho."""

    code = "ERR_HONCHO"

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, status=status, **details)
        self.status = status
        self.retry_after_s = retry_after_s


class HonchoUnavailable(HonchoFailure):
    """Honcho is unreachable or answered with a server error."""

    code = "ERR_HONCHO_UNAVAILABLE"


class HonchoUnreachable(HonchoUnavailable):
    """Honcho could not be reached; the request was never sent, so nothing of it can land."""

    code = "ERR_HONCHO_UNREACHABLE"


class HonchoRateLimited(HonchoFailure):
    """Honcho rate-limited memhoncho; retry later."""

    code = "ERR_HONCHO_RATE_LIMITED"


class HonchoRejected(HonchoFailure):
    """Honcho refused the request (bad request, auth, not found or validation)."""

    code = "ERR_HONCHO_REJECTED"


class HonchoTimeout(HonchoFailure):
    """Honcho did not answer in time."""

    code = "ERR_HONCHO_TIMEOUT"


class HonchoNoLLM(HonchoFailure):
    """The Honcho server cannot answer this without an LLM configured."""

    code = "ERR_HONCHO_NO_LLM"


def all_error_classes() -> list[type[MemhonchoError]]:
    """Every class of the tree, for guard tests and docs."""
    found: list[type[MemhonchoError]] = []
    pending: list[type[MemhonchoError]] = [MemhonchoError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found
