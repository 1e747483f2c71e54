"""The in-memory model behind the Honcho stand-in: workspaces, peers, sessions, messages.

Pure Python with no HTTP: every operation takes plain JSON values and returns plain JSON
values, or raises ``ApiError`` with the status and body the real server would answer.
Callers hold one lock around every call (``HonchoStandIn`` does).
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

#: Ids of workspaces, peers and sessions (HONCHO.md, "Limits").
ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_ID_CHARS = 512
MAX_MESSAGES_PER_CALL = 100
MAX_CONTENT_CHARS = 25_000
MAX_CONCLUSIONS_PER_CALL = 100
MAX_CONCLUSION_CHARS = 65_535
MAX_PAGE_SIZE = 100
MAX_SEARCH_LIMIT = 100
MAX_METADATA_KEYS = 100
MAX_METADATA_DEPTH = 5
MAX_CHAT_QUERY_CHARS = 10_000
DEFAULT_MAX_CONCLUSIONS = 25
#: A rough stand-in for tiktoken: about four characters a token.
CHARS_PER_TOKEN = 4

MESSAGE_FILTER_FIELDS = frozenset(
    {"workspace_id", "session_id", "peer_id", "token_count", "created_at", "metadata"}
)
SESSION_FILTER_FIELDS = frozenset({"id", "created_at", "is_active", "metadata"})
CONCLUSION_FILTER_FIELDS = frozenset(
    {"id", "session_id", "workspace_id", "observer_id", "observed_id", "level"}
)
OPERATORS = frozenset({"in", "gte", "lte", "gt", "lt", "ne", "contains", "icontains"})


class ApiError(Exception):
    """An answer the stand-in gives instead of a success: status plus FastAPI-shaped body."""

    def __init__(self, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail}


def invalid(loc: list[Any], msg: str, kind: str, value: Any = None) -> ApiError:
    """A 422 shaped like FastAPI's validation error (echoing the input, as FastAPI does)."""
    item: dict[str, Any] = {"type": kind, "loc": ["body", *loc], "msg": msg}
    if value is not None:
        item["input"] = value
    return ApiError(422, [item])


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def now_iso() -> str:
    return json_time(datetime.now(UTC))


@cache
def _times() -> TypeAdapter[datetime]:
    return TypeAdapter(datetime)


def json_time(when: datetime) -> str:
    """A time as Honcho answers it: UTC, pydantic's JSON form (``2021-06-01T00:00:00Z``)."""
    return str(_times().dump_python(when.astimezone(UTC), mode="json"))


def check_created_at(value: Any, loc: list[Any]) -> str | None:
    """A message's ``created_at`` as Honcho 3.0.12 takes it (pydantic's lax ``datetime``: ISO
    8601 or Unix seconds; naive read as UTC, timestamptz's session zone) and echoes it."""
    if value is None:
        return None
    try:
        when = _times().validate_python(value)
    except ValidationError:
        kind = "datetime_from_date_parsing"
        raise invalid(loc, "Input should be a valid datetime", kind, value) from None
    return json_time(when if when.tzinfo is not None else when.replace(tzinfo=UTC))


def new_id() -> str:
    """A nanoid-like id (21 characters of ``[A-Za-z0-9_-]``)."""
    return secrets.token_urlsafe(16)[:21]


def token_count(content: str) -> int:
    return math.ceil(len(content) / CHARS_PER_TOKEN)


@dataclass
class Peer:
    id: str
    workspace_id: str
    created_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    configuration: dict[str, Any] = field(default_factory=dict)
    cards: dict[str, list[str]] = field(default_factory=dict)  # target -> card

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "created_at": self.created_at,
            "metadata": self.metadata,
            "configuration": self.configuration,
        }


@dataclass
class Session:
    id: str
    workspace_id: str
    created_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    configuration: dict[str, Any] = field(default_factory=dict)
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # peer -> config
    messages: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    is_active: bool = True

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "is_active": self.is_active,
            "metadata": self.metadata,
            "configuration": self.configuration,
            "created_at": self.created_at,
        }


@dataclass
class Workspace:
    id: str
    created_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    configuration: dict[str, Any] = field(default_factory=dict)
    peers: dict[str, Peer] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)
    conclusions: list[dict[str, Any]] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "metadata": self.metadata,
            "configuration": self.configuration,
            "created_at": self.created_at,
        }


class Holdings:
    """Every workspace the stand-in holds, and the lookups its routes share."""

    def __init__(self) -> None:
        self.workspaces: dict[str, Workspace] = {}
        self.deleted_sessions: set[tuple[str, str]] = set()

    def workspace(self, ws: str) -> Workspace:
        found = self.workspaces.get(ws)
        if found is None:
            raise not_found("Workspace")
        return found

    def session(self, ws: str, sid: str) -> Session:
        found = self.workspace(ws).sessions.get(sid)
        if found is None or not found.is_active:
            raise ApiError(404, f"Session {sid} not found in workspace {ws}")
        return found

    def _ensure_workspace(self, ws: str) -> Workspace:
        if ws not in self.workspaces:
            self.workspaces[ws] = Workspace(id=ws, created_at=now_iso())
        return self.workspaces[ws]

    def _ensure_peer(self, workspace: Workspace, pid: str) -> Peer:
        if pid not in workspace.peers:
            workspace.peers[pid] = Peer(id=pid, workspace_id=workspace.id, created_at=now_iso())
        return workspace.peers[pid]

    def _join(self, workspace: Workspace, session: Session, peers: dict[str, Any]) -> None:
        """Add absent members with their config; members already present keep theirs (sticky)."""
        for pid, config in peers.items():
            check_id(pid, ["peers", pid])
            self._ensure_peer(workspace, pid)
            if pid not in session.peers:
                session.peers[pid] = dict(check_dict(config, ["peers", pid]))


# ---------------------------------------------------------------- validation


def check_id(value: Any, loc: list[Any]) -> str:
    if not isinstance(value, str):
        raise invalid(loc, "Input should be a valid string", "string_type", value)
    if not 1 <= len(value) <= MAX_ID_CHARS:
        raise invalid(loc, f"String should have 1..{MAX_ID_CHARS} characters", "string_length")
    if not ID_PATTERN.match(value):
        raise invalid(
            loc, f"String should match pattern '{ID_PATTERN.pattern}'", "string_pattern_mismatch"
        )
    return value


def check_metadata(value: Any, loc: list[Any]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(loc, "Input should be a valid dictionary", "dict_type")
    if len(value) > MAX_METADATA_KEYS:
        raise invalid(loc, f"Metadata has more than {MAX_METADATA_KEYS} keys", "value_error")
    if _depth(value) > MAX_METADATA_DEPTH:
        raise invalid(loc, f"Metadata nests deeper than {MAX_METADATA_DEPTH}", "value_error")
    return value


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_depth(v) for v in value), default=0)
    return 0


def check_dict(value: Any, loc: list[Any]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(loc, "Input should be a valid dictionary", "dict_type")
    return value


def check_page(query: dict[str, str]) -> tuple[int, int, bool]:
    try:
        page = int(query.get("page", "1"))
        size = int(query.get("size", "50"))
    except ValueError:
        raise ApiError(
            422, [{"type": "int_parsing", "loc": ["query"], "msg": "not an integer"}]
        ) from None
    if page < 1:
        raise ApiError(
            422, [{"type": "greater_than_equal", "loc": ["query", "page"], "msg": ">= 1"}]
        )
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ApiError(
            422,
            [{"type": "less_than_equal", "loc": ["query", "size"], "msg": f"1..{MAX_PAGE_SIZE}"}],
        )
    return page, size, query.get("reverse", "false").lower() == "true"


def paginate(items: list[dict[str, Any]], page: int, size: int) -> dict[str, Any]:
    total = len(items)
    start = (page - 1) * size
    return {
        "items": items[start : start + size],
        "total": total,
        "page": page,
        "size": size,
        "pages": math.ceil(total / size),
    }


# ------------------------------------------------------------------ filters


def matches(
    record: dict[str, Any], filters: dict[str, Any] | None, allowed: frozenset[str]
) -> bool:
    """Honcho's filter language on a plain record; unknown fields are refused (422)."""
    if not filters:
        return True
    if not isinstance(filters, dict):
        raise ApiError(422, "Invalid filter configuration")
    for key, cond in filters.items():
        if key in ("AND", "OR", "NOT"):
            if not isinstance(cond, list):
                raise ApiError(422, f"{key} takes a list of filters")
            results = [matches(record, sub, allowed) for sub in cond]
            ok = all(results) if key == "AND" else any(results) if key == "OR" else not any(results)
            if not ok:
                return False
        elif key not in allowed:
            raise ApiError(422, f"Unsupported filter field: {key}")
        elif key == "metadata":
            if not _metadata_matches(record.get("metadata") or {}, cond):
                return False
        elif not _value_matches(record.get(key), cond):
            return False
    return True


def _metadata_matches(metadata: dict[str, Any], cond: Any) -> bool:
    if cond == "*":
        return True
    if not isinstance(cond, dict):
        raise ApiError(422, "Invalid filter for 'metadata': it takes an object")
    for key, want in cond.items():
        present = key in metadata
        have = metadata.get(key)
        if isinstance(want, dict) and want and set(want) <= OPERATORS:
            if not present or not _value_matches(have, want):
                return False
        elif isinstance(want, dict):
            if not isinstance(have, dict) or not _metadata_matches(have, want):
                return False
        elif want != "*" and (not present or have != want):
            return False
    return True


def _value_matches(have: Any, cond: Any) -> bool:
    if cond == "*":
        return True
    if not isinstance(cond, dict):
        return bool(have == cond)
    for op, want in cond.items():
        if op not in OPERATORS:
            raise ApiError(422, f"Unsupported filter operator: {op}")
        if op == "in":
            if not isinstance(want, list):
                raise ApiError(422, "'in' takes a list")
            if have not in want:
                return False
        elif op == "ne":
            if have == want:
                return False
        elif op in ("contains", "icontains"):
            text, needle = str(have or ""), str(want)
            if op == "icontains":
                text, needle = text.lower(), needle.lower()
            if needle not in text:
                return False
        else:
            if have is None:
                return False
            try:
                ordered = {"gt": have > want, "gte": have >= want, "lt": have < want}
                ordered["lte"] = have <= want
            except TypeError:
                raise ApiError(422, f"Invalid operand for '{op}'") from None
            if not ordered[op]:
                return False
    return True
