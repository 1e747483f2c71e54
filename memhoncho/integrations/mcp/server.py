"""The MCP server over a ``Host``: the recall tools and the save tool; the prompt sections as a
resource and as a prompt.

Built on the SDK's low-level ``Server``, so the tools' schemas are memhoncho's own (the pydantic
models that check each call) and every refusal is memhoncho's typed error, its code and message:
an unknown tool is a JSON-RPC error (the protocol's), a refused call is a tool result marked as
an error (so the model reads it and can correct itself); both carry ``{code, message, ...}``.
The owner comes from the server (``--owner``, or the HTTP token), never from a tool argument.
Blocking work (an fsync, a call to Honcho) runs on worker threads, off the event loop: saves
and sections on threads of their own, recall on others, bounded per owner (capacity.py).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

import memhoncho
from memhoncho.errors import InvalidInput, InvalidToolCall, MemhonchoError
from memhoncho.integrations.mcp import save, scope
from memhoncho.integrations.mcp.capacity import Capacity
from memhoncho.recall import tools as recall_tools
from memhoncho.recall.arguments import parameters_schema

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from memhoncho.capture.host import Host

log = logging.getLogger(__name__)

SERVER_NAME = "memhoncho"
SECTIONS_PREFIX = "memhoncho://sections/"
SECTIONS_TEMPLATE = SECTIONS_PREFIX + "{conversation_id}"
PROMPT = "memory"
JSON = "application/json"

INSTRUCTIONS = (
    "Long-term memory of the user, across conversations. Save each finished turn with "
    f"{save.SAVE}; ask memory with {recall_tools.SEARCH} (the user's own past words) or "
    f"{recall_tools.CHAT} (a question about the user); note a lasting fact with "
    f"{recall_tools.REMEMBER}. The '{PROMPT}' prompt and the {SECTIONS_TEMPLATE} resource hold "
    "what memory knows for a conversation."
)


@dataclass(frozen=True)
class Memory:
    """What the server serves: the host, whose memory (asked per request) and the default
    conversation of a save or a prompt that names none."""

    host: Host
    owner: Callable[[], str | None]
    conversation: str
    capacity: Capacity = field(default_factory=Capacity)


#: hints a client may show or act on: what only reads, what writes, what a retry repeats
ANNOTATIONS = {
    recall_tools.SEARCH: types.ToolAnnotations(read_only_hint=True),
    recall_tools.CHAT: types.ToolAnnotations(read_only_hint=True),
    recall_tools.REMEMBER: types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    save.SAVE: types.ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
}


def tools() -> list[types.Tool]:
    """The recall tools as they are today, then the save tool."""
    listed = [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=_scoped_schema(parameters_schema(tool.arguments)),
            annotations=ANNOTATIONS[tool.name],
        )
        for tool in recall_tools.TOOLS.values()
    ]
    save_tool = types.Tool(
        name=save.SAVE,
        description=save.DESCRIPTION,
        input_schema=_scoped_schema(save.schema()),
        output_schema=save.output_schema(),
        annotations=ANNOTATIONS[save.SAVE],
    )
    return [*listed, save_tool]


def _scoped_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema saying the conversation id limits ``scope.scoped`` enforces, for every tool."""
    found = schema.get("properties", {}).get("conversation_id")
    if found is not None:
        for option in found.get("anyOf", [found]):
            if option.get("type") == "string":
                option.update(minLength=1, maxLength=scope.MAX_CONVERSATION_CHARS)
    return schema


def build(memory: Memory) -> Server[Any]:
    """The SDK server answering for ``memory``."""
    listed = tools()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await _call_tool(memory, params.name, params.arguments)

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        default = types.Resource(
            name=f"sections of {memory.conversation}",
            uri=sections_uri(memory.conversation),
            description="The prompt sections of the default conversation.",
            mime_type=JSON,
        )
        return types.ListResourcesResult(resources=[default])

    async def list_resource_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            name="sections",
            uri_template=SECTIONS_TEMPLATE,
            description="What long-term memory holds for a conversation, as prompt sections, "
            "from the local snapshot (no call to Honcho); says whether it is stale.",
            mime_type=JSON,
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if not params.uri.startswith(SECTIONS_PREFIX):
            _refuse(
                InvalidInput(
                    f"memhoncho has no resource there; its resources are {SECTIONS_TEMPLATE}"
                )
            )
        conversation = unquote(params.uri[len(SECTIONS_PREFIX) :])
        payload = await _sections(memory, conversation)
        text = json.dumps(payload, sort_keys=True)
        contents = [types.TextResourceContents(uri=params.uri, mime_type=JSON, text=text)]
        return types.ReadResourceResult(contents=contents)

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        argument = types.PromptArgument(
            name="conversation_id",
            description="The conversation; omit for the server's default.",
            required=False,
        )
        prompt = types.Prompt(
            name=PROMPT,
            description="What long-term memory holds about the user for this conversation, "
            "from the local snapshot (no call to Honcho).",
            arguments=[argument],
        )
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(
        ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != PROMPT:
            _refuse(
                InvalidInput(
                    f"memhoncho has no prompt {params.name[:64]!r}; its prompt is {PROMPT!r}"
                )
            )
        arguments = params.arguments or {}
        unknown = sorted(set(arguments) - {"conversation_id"})
        if unknown:
            _refuse(InvalidInput(f"memhoncho prompt {PROMPT}: its one argument is conversation_id"))
        payload = await _sections(memory, arguments.get("conversation_id", memory.conversation))
        text = (
            payload["text"]
            or f"Memory holds nothing for this conversation yet ({payload['status']})."
        )
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=text)
        )
        return types.GetPromptResult(
            description=f"memhoncho memory of {payload['conversation_id']} ({payload['status']})",
            messages=[message],
        )

    return Server(
        SERVER_NAME,
        version=memhoncho.__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def sections_uri(conversation: str) -> str:
    return SECTIONS_PREFIX + quote(conversation, safe="")


async def _call_tool(memory: Memory, name: str, arguments: Any) -> types.CallToolResult:
    if name != save.SAVE and name not in recall_tools.TOOLS:
        shown = name[: recall_tools.MAX_NAME_ECHO_CHARS]
        names = ", ".join([*recall_tools.TOOLS, save.SAVE])
        _refuse(
            InvalidToolCall(f"memhoncho has no tool {shown!r}; its tools are {names}", tool=shown)
        )
    try:
        owner = memory.owner()
        capacity = memory.capacity
        if name == save.SAVE:
            run = functools.partial(save.save, memory.host, owner, memory.conversation, arguments)
            result = await anyio.to_thread.run_sync(run, limiter=capacity.local)
        else:
            run = functools.partial(_recall, memory.host, owner, name, arguments)
            with capacity.recall_slot(owner):  # RecallBusy past the bounds: never queued
                result = await anyio.to_thread.run_sync(run, limiter=capacity.recall)
    except MemhonchoError as exc:
        log.info(
            "mcp tool refused", extra={"action": "mcp_tool_refused", "tool": name, "code": exc.code}
        )
        return _refusal(_named(exc, name))
    except Exception as exc:  # a bug answers the client as an error; it must not hang it
        log.exception("mcp tool crashed", extra={"action": "mcp_tool_crashed", "tool": name})
        return _refusal(MemhonchoError(f"memhoncho {name} failed ({type(exc).__name__})"))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(result, sort_keys=True))],
        structured_content=result,
    )


def _recall(host: Host, owner: str | None, name: str, arguments: Any) -> dict[str, Any]:
    """A recall tool for ``owner``, its conversation ids in the client's names."""
    _, valid = recall_tools.check_call(name, arguments)
    if isinstance(valid.get("conversation_id"), str):
        valid["conversation_id"] = scope.scoped(owner, valid["conversation_id"])
    result = host.call_tool(name, valid, owner=owner)
    for found in result.get("results", []):
        found["conversation_id"] = scope.unscoped(owner, found.get("conversation_id"))
    if isinstance(result.get("conversation_id"), str):
        result["conversation_id"] = scope.unscoped(owner, result["conversation_id"])
    return result


async def _sections(memory: Memory, conversation: object) -> dict[str, Any]:
    """The prompt sections of the owner's ``conversation`` as JSON (the snapshot only)."""
    try:
        owner = memory.owner()
        stored = scope.scoped(owner, conversation)
    except MemhonchoError as exc:
        _refuse(exc)
    sections = await anyio.to_thread.run_sync(
        memory.host.sections, stored, limiter=memory.capacity.local
    )
    payload = sections.model_dump(mode="json")
    payload.update(conversation_id=conversation, text=sections.render())
    return payload


def _named(exc: MemhonchoError, tool: str) -> MemhonchoError:
    """The same error, its message saying it came from memhoncho's tool (the model reads it)."""
    if not exc.message.startswith("memhoncho"):
        exc.message = f"memhoncho {tool}: {exc.message}"
        exc.args = (exc.message,)
    return exc


def _refusal(exc: MemhonchoError) -> types.CallToolResult:
    """A refused call as the tool's result: an error the model reads, with memhoncho's code."""
    payload = recall_tools.error_payload(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{exc.code}: {exc.message}")],
        structured_content={"error": payload},
        is_error=True,
    )


def _refuse(exc: MemhonchoError) -> NoReturn:
    """A refused request as a JSON-RPC error (invalid params), memhoncho's error as its data."""
    raise MCPError(
        types.INVALID_PARAMS, f"{exc.code}: {exc.message}", recall_tools.error_payload(exc)
    )
