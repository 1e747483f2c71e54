"""One Claude Code hook call, handled: the turns finished since the session's cursor captured
in order, and on ``SessionStart`` the prompt sections printed as additional context. The relay
runs this warm for the hook (``relay_answer``); the hook runs it in its own process when no
relay answers. Nothing here calls Honcho: captures are the outbox's, sections the snapshot's.

Which events read the transcript, and how far (``imports.claude_code.read_turns``):
``Stop`` and ``UserPromptSubmit`` find Claude idle, so the last turn counts once its last act
was text; ``PreCompact`` reads only turns a later prompt closed; ``SessionEnd`` settles the
last turn whatever it holds (unanswered when Claude said nothing).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memhoncho.errors import ForkRefused, InvalidEvent, InvalidInput, MemhonchoError
from memhoncho.imports import claude_code as transcript
from memhoncho.integrations.claude_code import cursor

if TYPE_CHECKING:
    from memhoncho.capture.host import Host
    from memhoncho.capture.relay_socket import Answer

log = logging.getLogger(__name__)

IDLE_EVENTS = ("Stop", "UserPromptSubmit")
FINAL_EVENTS = ("SessionEnd",)
READING_EVENTS = (*IDLE_EVENTS, "PreCompact", *FINAL_EVENTS)
CONTEXT_EVENTS = ("SessionStart",)
#: the events ``install`` writes hooks for
EVENTS = (*CONTEXT_EVENTS, "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd")
#: the relay's socket op for a hook call (``capture/relay_socket.py``)
OP = "claude-code"


@dataclass(frozen=True)
class HookCall:
    """What a hook's JSON on stdin says, checked."""

    event: str
    session_id: str
    transcript_path: str | None
    cwd: str | None

    @classmethod
    def parse(cls, raw: bytes) -> HookCall:
        try:
            data = json.loads(raw)
        except ValueError:
            raise InvalidEvent("the hook's input is not JSON") from None
        if not isinstance(data, dict):
            raise InvalidEvent("the hook's input is not a JSON object")
        event, session = data.get("hook_event_name"), data.get("session_id")
        if not isinstance(event, str) or not isinstance(session, str) or not session:
            raise InvalidEvent("the hook's input lacks hook_event_name or session_id")
        path, cwd = data.get("transcript_path"), data.get("cwd")
        return cls(
            event,
            session,
            path if isinstance(path, str) and path else None,
            cwd if isinstance(cwd, str) else None,
        )


def handle(host: Host, raw: bytes, owner: str | None) -> str:
    """Handle one hook call; what the hook prints on stdout. Raises the typed error of a
    call that could not be handled (the hook records it and still exits 0)."""
    call = HookCall.parse(raw)
    data_dir = str(host.deployment.data_dir)
    if call.event in READING_EVENTS:
        if call.transcript_path is None:
            raise InvalidEvent("the hook's input names no transcript_path")
        capture_new_turns(host, call, owner)
    if call.event in CONTEXT_EVENTS:
        return context(host, call, owner)
    if call.event in READING_EVENTS:
        cursor.remember_session(data_dir, owner, call.session_id)
    return ""


def capture_new_turns(host: Host, call: HookCall, owner: str | None) -> int:
    """Capture every turn finished since the cursor, in order; the cursor moves only after
    all of them are durable, so a hook killed on the way captures them again as duplicates.
    The number captured (new records)."""
    data_dir = str(host.deployment.data_dir)
    assert call.transcript_path is not None
    if not os.path.exists(call.transcript_path):
        return 0  # a new session's first prompt: Claude Code has written nothing yet
    with cursor.session_lock(data_dir, call.session_id):
        place = cursor.load(data_dir, call.session_id)
        turns, read = transcript.read_turns(
            call.transcript_path,
            place.read,
            session_id=call.session_id,
            final=call.event in FINAL_EVENTS,
            idle=call.event in IDLE_EVENTS,
        )
        forked, captured = place.forked, 0
        for turn in turns:
            if not turn.inherited and not forked and read.parent_session_id is not None:
                _fork(host, read, call.session_id)
                forked = True
            captured += _capture(host, turn, owner)
        cursor.save(data_dir, call.session_id, cursor.Cursor(read, forked), call.transcript_path)
    return captured


def _fork(host: Host, read: transcript.ReadState, session_id: str) -> None:
    """The resumed session continues its parent's conversation from the last repeated turn."""
    assert read.parent_session_id is not None and read.fork_entry is not None
    try:
        host.conversation_forked(
            transcript.conversation_id(read.parent_session_id),
            transcript.conversation_id(session_id),
            read.fork_entry,
        )
    except ForkRefused:
        pass  # recorded before (a hook killed after it), or the session already began


def _capture(host: Host, turn: transcript.Turn, owner: str | None) -> int:
    """Capture one turn; 1 when a record was written. A turn refused for what it is (too
    large, conflicting with what was stored under its run id) is logged and passed: retrying
    it cannot succeed, and it must not hold back the turns after it."""
    try:
        result = host.capture(turn.event(owner))
    except InvalidInput as exc:
        log.warning(
            "a Claude Code turn was refused",
            extra={"action": "claude_code_turn_refused", "code": exc.code, "run": turn.run_id},
        )
        cursor.record_error(host.deployment.data_dir, "capture", exc.code, exc.message)
        return 0
    return 1 if result.status == "captured" else 0


def context(host: Host, call: HookCall, owner: str | None) -> str:
    """``SessionStart``'s output: the sections of this session's conversation, else of the
    owner's newest session (a new session has no snapshot yet; the user's memory is the
    owner's, whichever session refreshed it), as Claude Code's additional context."""
    data_dir = str(host.deployment.data_dir)
    text = ""
    for session in (call.session_id, cursor.latest_session(data_dir, owner)):
        if session is None:
            continue
        text = host.sections(transcript.conversation_id(session)).render()
        if text:
            break
    if not text:
        return ""
    output = {"hookSpecificOutput": {"hookEventName": call.event, "additionalContext": text}}
    return json.dumps(output, ensure_ascii=False) + "\n"


def record_failure(data_dir: str, raw: bytes, exc: BaseException) -> None:
    """Log a hook call that failed and keep it for the status view."""
    try:
        event = str(json.loads(raw).get("hook_event_name") or "?")[:40]
    except (ValueError, AttributeError):
        event = "?"
    if isinstance(exc, MemhonchoError):
        code, message = exc.code, exc.message
    else:
        code, message = "ERR_HOOK", f"{type(exc).__name__} in the Claude Code hook"
    log.warning(
        "a Claude Code hook call failed; its turns wait for the next hook",
        extra={"action": "claude_code_hook_failed", "event": event, "code": code},
    )
    cursor.record_error(data_dir, event, code, message)


def relay_answer(host: Host, header: dict[str, Any], body: bytes) -> Answer:
    """The relay's side of a hook call: handled here, warm; declined (the hook handles it
    itself) when this relay cannot read the transcript (a relay in a container)."""
    from memhoncho.capture.relay_socket import DECLINED

    try:
        path = json.loads(body).get("transcript_path")
    except (ValueError, AttributeError):
        path = None
    if isinstance(path, str) and path and not os.access(path, os.R_OK):
        return DECLINED, "", ""
    owner = header.get("owner")
    try:
        out = handle(host, body, owner if isinstance(owner, str) else None)
    except Exception as exc:  # noqa: BLE001 - a hook call never fails the session
        record_failure(str(host.deployment.data_dir), body, exc)
        return 0, "", ""
    return 0, out, ""
