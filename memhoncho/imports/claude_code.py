"""Claude Code's session transcript (``~/.claude/projects/<project>/<session>.jsonl``) read into
turns: each user prompt with Claude's final text answer, from a byte cursor, so a hook reads
only what was written since it last ran. The hooks (``integrations/claude_code``) and the import
of the projects folder read with this one module, so a hooked and an imported session are the
same conversation with the same run ids.

The rules (``docs/claude-code.md`` says them to users):

- A turn is a user prompt and everything up to the next prompt. Its answer is the text of the
  last assistant message of the turn that has text: tool calls, tool results and thinking are
  never stored. Images and documents in a prompt leave a note, never their bytes.
- Meta lines (``isMeta``: command caveats, hook feedback), compaction summaries
  (``isCompactSummary``) and ``system``/``summary`` lines are Claude Code's own words, not the
  user's: skipped. Compaction appends to the file and never rewrites it, so what was read
  stays read.
- Subagent work (``isSidechain`` lines, and ``agent-*.jsonl`` files) is a tool call of the main
  turn: skipped; what the subagent found reaches the stored answer through Claude's own text.
- A slash command is stored as its prompt (``/name args``) when Claude answered it; a local one
  (``/model``, ``/clear``, ...: no answer before the next prompt) is skipped, and so is a
  local command's output and ``!`` shell mode.
- A resumed session (``--resume``/``--continue`` with a new session id) repeats the earlier
  session's lines, which keep that session's ``sessionId``: those turns belong to the earlier
  conversation (``Turn.session_id``), and the new one continues from the last of them through
  a fork (``ReadState.parent_session_id``, ``fork_entry``), never storing the history twice.

Run ids come from the prompt line's ``uuid`` and entry ids from the turn's position in the
file, so a hook that runs twice, or a cursor lost in a crash, captures the same runs again and
gets ``duplicate``. Pure reading: no pydantic, no settings, nothing written (the hook's fast
path imports this).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memhoncho.imports import bounded

RUN_PREFIX = "cc-"  # a run id is this and the prompt line's uuid
CONVERSATION_PREFIX = "claude-code-"  # a conversation id is this and the session id
#: what stands in a prompt for a part that is not text, by the part's kind
NOTE = "[{kind} not stored: memhoncho keeps text only]"
MEDIA = {"image": "image", "document": "file"}
#: a user line that starts with one of these is Claude Code's, not the user's
NOT_PROMPTS = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "[Request interrupted by user",
)
COMMAND_TAG = "<command-name>"
READ_CHUNK = 1 << 20  # bytes read at a time


def conversation_id(session_id: str) -> str:
    """The memhoncho conversation of a Claude Code session."""
    return CONVERSATION_PREFIX + session_id


@dataclass(frozen=True)
class Turn:
    """One finished turn: the prompt and Claude's final text answer (None: not answered)."""

    session_id: str  #: the session the turn was said in (an earlier one for resumed history)
    uuid: str  #: the prompt line's uuid
    ordinal: int  #: the turn's position in the file: entries ``2n`` (prompt), ``2n + 1``
    prompt: str
    answer: str | None
    prompt_at: str | None  #: the transcript's timestamps (ISO 8601, as written)
    answer_at: str | None
    inherited: bool = False  #: repeated from an earlier session by a resume
    cwd: str | None = None  #: the project directory Claude Code ran in

    @property
    def run_id(self) -> str:
        return RUN_PREFIX + self.uuid

    @property
    def conversation_id(self) -> str:
        return conversation_id(self.session_id)

    def event(self, owner: str | None) -> dict[str, Any]:
        """The run ``Host.capture`` (or ``memhoncho capture``) takes, as plain JSON data."""
        outcome: dict[str, Any] = {"status": "unanswered"}
        if self.answer is not None:
            outcome = {
                "status": "answered",
                "answer": {
                    "entry_id": 2 * self.ordinal + 1,
                    "content": [{"type": "text", "text": self.answer}],
                },
            }
        event = {
            "conversation_id": self.conversation_id,
            "owner": owner,
            "run_id": self.run_id,
            "inputs": [{"entry_id": 2 * self.ordinal, "text": self.prompt}],
            "outcome": outcome,
        }
        if self.cwd:  # the project, in the conversation's Honcho session
            event["session_metadata"] = {"source": "claude-code", "project": self.cwd}
        if _aware(self.prompt_at):  # Honcho's created_at: when the prompt was said
            event["happened_at"] = self.prompt_at
        return event


@dataclass(frozen=True)
class ReadState:
    """Where reading a transcript stopped: saved by the caller after it captured the turns."""

    offset: int = 0  #: bytes of the file read and settled (a turn still open is read again)
    turns: int = 0  #: turns counted before ``offset`` (the next turn's ordinal)
    #: the session the resumed history came from, and the entry the new session forks at
    parent_session_id: str | None = None
    fork_entry: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "turns": self.turns,
            "parent_session_id": self.parent_session_id,
            "fork_entry": self.fork_entry,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReadState:
        def whole(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and value >= 0 else 0

        parent = data.get("parent_session_id")
        fork = data.get("fork_entry")
        return cls(
            offset=whole("offset"),
            turns=whole("turns"),
            parent_session_id=parent if isinstance(parent, str) else None,
            fork_entry=fork if isinstance(fork, int) else None,
        )


@dataclass
class _Open:
    """The turn being read: its prompt line and what Claude said so far."""

    start: int  #: byte offset of the prompt line
    session_id: str
    uuid: str
    prompt: str
    prompt_at: str | None
    cwd: str | None
    command: bool
    answer_parts: list[str] = field(default_factory=list)
    answer_message: str | None = None  #: the message id the answer parts belong to
    answer_at: str | None = None
    settled: bool = False  #: the last thing Claude did was text (no tool call after it)

    def turn(self, ordinal: int, own_session: str) -> Turn:
        answer = "\n".join(self.answer_parts) if self.answer_parts else None
        return Turn(
            session_id=self.session_id,
            uuid=self.uuid,
            ordinal=ordinal,
            prompt=self.prompt,
            answer=answer,
            prompt_at=self.prompt_at,
            answer_at=self.answer_at if answer is not None else None,
            inherited=self.session_id != own_session,
            cwd=self.cwd,
        )


def read_turns(
    path: str | os.PathLike[str],
    state: ReadState,
    *,
    session_id: str,
    final: bool,
    idle: bool = False,
) -> tuple[list[Turn], ReadState]:
    """The turns finished since ``state``, and the state to save once they are captured.

    A turn is finished when the next prompt begins. ``idle`` (Claude stopped: the ``Stop`` and
    ``UserPromptSubmit`` hooks) also finishes the last turn when Claude's last act was text;
    ``final`` (the session ended, or an import of a file that will not grow) finishes it
    whatever it holds, unanswered if Claude said nothing. A line not yet ended by a newline is
    left for the next read. A file shorter than the cursor (replaced) is read from the start.
    """
    with bounded.open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < state.offset:
            state = ReadState()
        handle.seek(state.offset)
        turns: list[Turn] = []
        parent, fork_entry = state.parent_session_id, state.fork_entry
        ordinal = state.turns
        settled_offset = state.offset  # everything before this is read for good
        open_turn: _Open | None = None
        position = state.offset

        def close(current: _Open | None) -> None:
            nonlocal ordinal, parent, fork_entry
            if current is None or (current.command and not current.answer_parts):
                return  # a local slash command: nothing Claude said
            turn = current.turn(ordinal, session_id)
            ordinal += 1
            if turn.inherited:
                parent, fork_entry = turn.session_id, 2 * turn.ordinal + 1
            turns.append(turn)

        for line in bounded.whole_lines(handle, READ_CHUNK):
            start, position = position, position + len(line)
            record = _record(line)
            if record is None:
                continue
            kind = _kind(record)
            if kind == "prompt":
                close(open_turn)
                settled_offset = start
                open_turn = _prompt(record, start, session_id)
            elif open_turn is not None and kind == "assistant":
                _answer(open_turn, record)
            elif open_turn is not None and kind == "tool":
                open_turn.settled = False
            if open_turn is None:
                settled_offset = position
        if open_turn is not None and (final or (idle and open_turn.settled)):
            close(open_turn)
            settled_offset = position
        # an open turn (or a local command waiting for the next prompt) is read again next time
        new_state = replace(
            state,
            offset=settled_offset,
            turns=ordinal,
            parent_session_id=parent,
            fork_entry=fork_entry,
        )
        return turns, new_state


def _record(line: bytes | int) -> dict[str, Any] | None:
    if not isinstance(line, bytes):
        return None  # a line past the bound: a torn or hostile one, never Claude Code's
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # a torn or foreign line: never a reason to stop
        return None
    return record if isinstance(record, dict) else None


def _kind(record: dict[str, Any]) -> str:
    """``prompt``, ``assistant`` (Claude's words in the main chain), ``tool`` (a tool's
    result), or ``skip``."""
    kind = record.get("type")
    if kind not in ("user", "assistant") or record.get("isSidechain"):
        return "skip"
    if record.get("isMeta") or record.get("isCompactSummary") or record.get("isApiErrorMessage"):
        return "skip"
    message = record.get("message")
    if not isinstance(message, dict):
        return "skip"
    if kind == "assistant":
        return "assistant"
    content = message.get("content")
    if isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return "tool"
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        first = next((t for t in texts if isinstance(t, str)), "")
        has_media = any(isinstance(b, dict) and b.get("type") in MEDIA for b in content)
        if not has_media and not first.strip():
            return "skip"
    elif isinstance(content, str):
        first = content
        if not first.strip():
            return "skip"
    else:
        return "skip"
    if first.lstrip().startswith(NOT_PROMPTS):
        return "skip"
    return "prompt"


def _prompt(record: dict[str, Any], start: int, own_session: str) -> _Open:
    content = record["message"].get("content")
    if isinstance(content, str):
        text = content
    else:
        texts, notes = [], []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") in MEDIA:
                notes.append(NOTE.format(kind=MEDIA[block["type"]]))
        text = "\n".join([t for t in texts if t] + notes)
    command = COMMAND_TAG in text
    if command:
        text = _command_text(text)
    session = record.get("sessionId")
    return _Open(
        start=start,
        session_id=session if isinstance(session, str) and session else own_session,
        uuid=str(record.get("uuid") or f"offset-{start}"),
        prompt=text,
        prompt_at=_text(record.get("timestamp")),
        cwd=_text(record.get("cwd")),
        command=command,
    )


def _command_text(text: str) -> str:
    """``/name args`` of a slash command line (``<command-name>/x</command-name>...``)."""

    def tag(name: str) -> str:
        opening, closing = f"<{name}>", f"</{name}>"
        begin = text.find(opening)
        end = text.find(closing, begin + len(opening))
        return text[begin + len(opening) : end].strip() if begin >= 0 and end >= 0 else ""

    name = tag("command-name")
    if not name.startswith("/"):
        name = "/" + name
    args = tag("command-args")
    return f"{name} {args}" if args else name


def _answer(turn: _Open, record: dict[str, Any]) -> None:
    """Take an assistant line into the open turn: its text blocks (the newest message with
    text is the answer; a streamed message spans several lines with one message id)."""
    message = record["message"]
    content = message.get("content")
    blocks = [content] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return
    texts: list[str] = []
    last_is_text = False
    for block in blocks:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if block["text"].strip():
                texts.append(block["text"])
                last_is_text = True
        elif block.get("type") == "tool_use":
            last_is_text = False
    if texts:
        message_id = _text(message.get("id")) or _text(record.get("uuid"))
        if message_id != turn.answer_message:
            turn.answer_parts = []
            turn.answer_message = message_id
        turn.answer_parts.extend(texts)
        turn.answer_at = _text(record.get("timestamp"))
    if texts or any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
        turn.settled = last_is_text


def _aware(stamp: str | None) -> bool:
    """Whether a transcript timestamp is a time with its zone (``...Z``): anything else is
    left out of the run, which then takes its capture time, rather than refuse the turn."""
    if stamp is None:
        return False
    try:
        return datetime.fromisoformat(stamp).tzinfo is not None
    except ValueError:
        return False


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
