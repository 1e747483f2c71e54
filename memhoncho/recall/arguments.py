"""The recall tools' arguments: strict pydantic models, and the JSON schemas made from them.

One definition serves both sides: the model is shown ``parameters_schema(model)`` and its call
is checked by ``parse_arguments`` against the same model, so the two cannot disagree. A refusal
names the argument and the rule, never the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memhoncho import ids
from memhoncho.errors import InvalidToolCall
from memhoncho.honcho.adapter import ReasoningLevel

MAX_SEARCH_QUERY_CHARS = 2_000  # a search query is a few words; longer is a mistake
MAX_CHAT_QUERY_CHARS = 10_000  # Honcho answers 422 past this (HONCHO.md, "Limits")
MAX_CONCLUSION_CHARS = 65_535  # Honcho answers 422 past this (HONCHO.md, "Limits")
MAX_ARGUMENT_ERRORS = 10  # argument problems named in one InvalidToolCall
NOT_BLANK = r"\S"  # JSON-schema and pydantic pattern: at least one non-whitespace character
#: A key the model sent that looks like a field name is echoed in errors; anything else is "?".
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


class ToolArguments(BaseModel):
    """Strict: no coercion of wrong types, and unknown keys (an ``owner`` among them) refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SearchArguments(ToolArguments):
    """Search the user's own past messages, across all of their conversations."""

    query: str = Field(
        min_length=1,
        max_length=MAX_SEARCH_QUERY_CHARS,
        pattern=NOT_BLANK,
        description="Words to look for in what the user has written before.",
    )


class ChatArguments(ToolArguments):
    """Ask memory a question about the user."""

    query: str = Field(
        min_length=1,
        max_length=MAX_CHAT_QUERY_CHARS,
        pattern=NOT_BLANK,
        description="A natural-language question about the user.",
    )
    reasoning_level: ReasoningLevel | None = Field(
        None,
        description=(
            "How hard memory should think: minimal and low are fast, high and max are "
            "thorough and slow. Omit for the default."
        ),
    )


class RememberArguments(ToolArguments):
    """Write down something learned about the user."""

    content: str = Field(
        min_length=1,
        max_length=MAX_CONCLUSION_CHARS,
        pattern=NOT_BLANK,
        description="One self-contained fact or conclusion about the user, in plain words.",
    )
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=ids.MAX_INPUT_LEN,
        description=(
            "The conversation this was learned in, to tie it to that conversation as well. "
            "Omit to remember it about the user in general."
        ),
    )


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, self-contained (no ``$ref``) and without pydantic's titles."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    inlined = _inline(schema, definitions)
    inlined.pop("description", None)  # the tool's own description says it
    inlined["additionalProperties"] = False
    return inlined


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        merged = {**definitions[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, definitions)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _inline(prop, definitions) for name, prop in value.items()}
        else:
            out[key] = _inline(value, definitions)
    return out


def parse_arguments(tool: str, model: type[ToolArguments], arguments: Any) -> Any:
    """The validated arguments (from a dict, a JSON string or the model); else InvalidToolCall."""
    if isinstance(arguments, model):
        return arguments
    if isinstance(arguments, str | bytes):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise InvalidToolCall(f"memhoncho {tool}: arguments are not valid JSON") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise InvalidToolCall(f"memhoncho {tool}: arguments must be a JSON object")
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors(include_input=False, include_url=False)]
        problems = problems[:MAX_ARGUMENT_ERRORS]
        raise InvalidToolCall(
            f"memhoncho {tool}: invalid arguments: {'; '.join(problems)}", problems=problems
        ) from None


def _problem(err: Any) -> str:
    where = ".".join(
        str(part) if isinstance(part, int) or _FIELD_NAME.fullmatch(str(part)) else "?"
        for part in err.get("loc", ())
    )
    kind = err.get("type", "")
    if kind == "string_pattern_mismatch":
        message = "must not be blank"
    elif kind == "extra_forbidden":
        message = "is not an argument of this tool"
    elif kind == "missing":
        message = "is required"
    else:
        message = str(err.get("msg", "is invalid"))
    return f"{where or 'arguments'} {message}"
