"""The recall tools as the model sees them: names, descriptions and JSON schemas; a call
checked and run for one owner; its outcome, or its typed error, as JSON.

What each tool does against Honcho is ``recall.honcho_tools``. The owner (the calling user)
always comes from the host, never from the model's arguments, so one user can never reach
another's memory. Arguments are strict pydantic models, and the same models generate the JSON
schemas handed to the model. Failures are typed memhoncho errors whose messages name memhoncho
and never the API key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.errors import (
    HonchoFailure,
    InvalidToolCall,
    MemhonchoError,
    all_error_classes,
)
from memhoncho.recall.arguments import (
    ChatArguments,
    RememberArguments,
    SearchArguments,
    ToolArguments,
    parameters_schema,
    parse_arguments,
)
from memhoncho.recall.honcho_tools import (
    CHAT,
    REMEMBER,
    SEARCH,
    honcho_chat,
    honcho_remember,
    honcho_search,
)
from memhoncho.settings import Settings

log = logging.getLogger(__name__)

MAX_NAME_ECHO_CHARS = 64  # characters of an unknown tool name echoed back


@dataclass(frozen=True)
class Tool:
    """One recall tool: its name, what the model is told, its arguments and how long it may take."""

    name: str
    description: str
    arguments: type[ToolArguments]
    run: Callable[[Deployment, str | None, Any], dict[str, Any]]
    timeout_s: Callable[[Settings], float]


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            SEARCH,
            "Search the user's own past messages across all of their conversations. Returns "
            "the user's words only, never the agent's replies, each with its conversation id "
            "and time, newest first, long messages trimmed.",
            SearchArguments,
            honcho_search,
            lambda s: s.tool_timeout_s,
        ),
        Tool(
            CHAT,
            "Ask long-term memory a question about the user (preferences, history, goals). "
            "Memory reasons over everything learned about the user across conversations and "
            "answers in prose. Can take tens of seconds.",
            ChatArguments,
            honcho_chat,
            lambda s: s.chat_timeout_s,
        ),
        Tool(
            REMEMBER,
            "Remember a fact or conclusion about the user for future conversations. Give a "
            "conversation_id to also tie it to that conversation; without one it is "
            "remembered about the user in general. The result says which.",
            RememberArguments,
            honcho_remember,
            lambda s: s.tool_timeout_s,
        ),
    )
}


def tool_definitions() -> list[dict[str, Any]]:
    """The three tools in the function-calling format model APIs accept."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": parameters_schema(tool.arguments),
            },
        }
        for tool in TOOLS.values()
    ]


def lookup(name: object) -> Tool:
    """The tool called ``name``; InvalidToolCall for anything else."""
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        shown = name[:MAX_NAME_ECHO_CHARS] if isinstance(name, str) else type(name).__name__
        raise InvalidToolCall(
            f"memhoncho has no tool {shown!r}; its tools are {', '.join(TOOLS)}",
            tool=shown,
        )
    return tool


def check_call(name: object, arguments: Any) -> tuple[Tool, dict[str, Any]]:
    """The tool and its validated arguments as JSON; InvalidToolCall before anything is sent."""
    tool = lookup(name)
    valid = parse_arguments(tool.name, tool.arguments, arguments)
    return tool, valid.model_dump(mode="json", exclude_none=True)


def call_tool(
    deployment: Deployment, name: object, arguments: Any, owner: str | None
) -> dict[str, Any]:
    """Run one tool for ``owner``; typed memhoncho errors naming memhoncho and the tool."""
    tool = lookup(name)
    try:
        ids.peer_id(owner)
        result = tool.run(deployment, owner, arguments)
    except MemhonchoError as exc:
        log.info(
            "recall tool failed",
            extra={"action": "recall_failed", "tool": tool.name, "code": exc.code},
        )
        raise _named(exc, tool.name) from None
    log.info("recall tool answered", extra={"action": "recall_answered", "tool": tool.name})
    return result


def outcome(
    deployment: Deployment, name: object, arguments: Any, owner: str | None
) -> dict[str, Any]:
    """``call_tool`` as a JSON-able outcome for the Celery result backend, never raising."""
    try:
        return {"ok": True, "result": call_tool(deployment, name, arguments, owner)}
    except MemhonchoError as exc:
        return {"ok": False, "error": error_payload(exc)}
    except Exception as exc:  # a bug must still answer the waiting host, not hang it
        log.exception(
            "recall tool crashed", extra={"action": "recall_crashed", "error": type(exc).__name__}
        )
        failure = MemhonchoError(f"memhoncho's recall tool failed ({type(exc).__name__})")
        return {"ok": False, "error": error_payload(failure)}


class UserTools(Mapping[str, Callable[..., dict[str, Any]]]):
    """The recall tools bound to one user by the host; the model never chooses whose memory.

    Call them as methods (``tools.honcho_search("knee")``), by name (``tools["honcho_chat"]``)
    or as the model's call (``tools.call(name, arguments)``).
    """

    def __init__(self, call: Callable[[str, Any], dict[str, Any]]) -> None:
        self._call = call

    def honcho_search(self, query: str) -> dict[str, Any]:
        return self._call(SEARCH, {"query": query})

    def honcho_chat(self, query: str, reasoning_level: str | None = None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"query": query}
        if reasoning_level is not None:
            arguments["reasoning_level"] = reasoning_level
        return self._call(CHAT, arguments)

    def honcho_remember(self, content: str, conversation_id: str | None = None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"content": content}
        if conversation_id is not None:
            arguments["conversation_id"] = conversation_id
        return self._call(REMEMBER, arguments)

    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        """A model's tool call, as it came (arguments as a dict or a JSON string)."""
        return self._call(name, arguments)

    def definitions(self) -> list[dict[str, Any]]:
        return tool_definitions()

    def __getitem__(self, name: str) -> Callable[..., dict[str, Any]]:
        lookup(name)
        method: Callable[..., dict[str, Any]] = getattr(self, name)
        return method

    def __iter__(self) -> Iterator[str]:
        return iter(TOOLS)

    def __len__(self) -> int:
        return len(TOOLS)


def error_payload(exc: MemhonchoError) -> dict[str, Any]:
    """A memhoncho error as JSON: code, message, details and (if any) retry_after_s."""
    payload = _jsonable(exc.as_dict())
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        payload["retry_after_s"] = retry_after
    return dict(payload)


def error_from_payload(payload: Mapping[str, Any]) -> MemhonchoError:
    """The typed error an ``error_payload`` describes (the host's side of the Celery path)."""
    details = {k: v for k, v in payload.items() if k not in ("code", "message")}
    classes = {cls.code: cls for cls in all_error_classes()}
    cls = classes.get(str(payload.get("code")), MemhonchoError)
    message = str(payload.get("message") or "") or None
    if issubclass(cls, HonchoFailure):
        status = details.pop("status", None)
        retry_after = details.pop("retry_after_s", None)
        return cls(message, status=status, retry_after_s=retry_after, **details)
    return cls(message, **details)


def _named(exc: MemhonchoError, tool: str) -> MemhonchoError:
    """The same error, its message saying it came from memhoncho's tool (the model reads it)."""
    if not exc.message.startswith("memhoncho"):
        exc.message = f"memhoncho {tool}: {exc.message}"
        exc.args = (exc.message,)
    return exc


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
