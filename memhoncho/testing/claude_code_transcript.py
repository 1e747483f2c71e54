"""Claude Code session transcripts for tests and benches, line for line in the shape Claude
Code 2.x writes them (``~/.claude/projects/<project>/<session>.jsonl``): a user prompt, the
assistant's streamed lines (thinking, text, tool_use, one line per block under one message
id), tool results as user lines, meta lines, slash commands, a compaction boundary and its
summary, sidechain (subagent) lines, images, and a resume's repeated history.

``Transcript`` appends to a real file as Claude Code does, so a test can grow it between hook
calls.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

VERSION = "2.1.12"
START = datetime(2026, 1, 20, 11, 57, 17, tzinfo=UTC)
#: a 1x1 PNG, as Claude Code stores a pasted image (base64 in the line)
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6"
    "kgAAAABJRU5ErkJggg=="
)


@dataclass
class Transcript:
    """A growing transcript file of one session."""

    path: str
    session_id: str
    cwd: str = "/home/ana/projects/shop"
    git_branch: str = "main"
    parent: str | None = None  #: the last line's uuid (lines chain by ``parentUuid``)
    _clock: itertools.count[int] = field(default_factory=itertools.count)
    _messages: itertools.count[int] = field(default_factory=itertools.count)

    # ---- lines ------------------------------------------------------------------------

    def _base(
        self, kind: str, *, sidechain: bool = False, session: str | None = None
    ) -> dict[str, Any]:
        line_id = str(uuid.uuid4())
        stamp = START + timedelta(seconds=next(self._clock))
        base = {
            "parentUuid": self.parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": session or self.session_id,
            "version": VERSION,
            "gitBranch": self.git_branch,
            "type": kind,
            "uuid": line_id,
            "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        if not sidechain:
            self.parent = line_id
        return base

    def write(self, *records: dict[str, Any], newline: bool = True) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            for i, record in enumerate(records):
                end = "\n" if newline or i < len(records) - 1 else ""
                handle.write(json.dumps(record, ensure_ascii=False) + end)

    def user(self, content: str | list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        session = extra.pop("session", None)
        record = self._base("user", sidechain=extra.pop("sidechain", False), session=session)
        record["message"] = {"role": "user", "content": content}
        record.update(extra)
        return record

    def assistant(
        self, block: dict[str, Any], *, message_id: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        session = extra.pop("session", None)
        record = self._base("assistant", sidechain=extra.pop("sidechain", False), session=session)
        record["requestId"] = f"req_{message_id or 'x'}"
        record["message"] = {
            "model": "claude-opus-4-5-20251101",
            "id": message_id or self.message_id(),
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 12},
        }
        record.update(extra)
        return record

    def message_id(self) -> str:
        return f"msg_01{next(self._messages):022d}"

    # ---- what happens in a session -----------------------------------------------------

    def turn(
        self, prompt: str, answer: str, *, tools: int = 0, session: str | None = None
    ) -> list[dict[str, Any]]:
        """A prompt; thinking; ``tools`` rounds of a tool call and its result (each with a
        line of text before it); then the final answer, in two text lines of one message."""
        lines = [self.user(prompt, session=session)]
        first = self.message_id()
        lines.append(
            self.assistant(
                {"type": "thinking", "thinking": "plan", "signature": "sig"},
                message_id=first,
                session=session,
            )
        )
        for i in range(tools):
            message = first if i == 0 else self.message_id()
            lines.append(
                self.assistant(
                    {"type": "text", "text": f"Let me look ({i})."},
                    message_id=message,
                    session=session,
                )
            )
            tool_id = f"toolu_01{uuid.uuid4().hex[:22]}"
            lines.append(
                self.assistant(
                    {
                        "type": "tool_use",
                        "id": tool_id,
                        "name": "Read",
                        "input": {"file_path": "/x.py"},
                    },
                    message_id=message,
                    session=session,
                )
            )
            lines.append(
                self.user(
                    [
                        {
                            "tool_use_id": tool_id,
                            "type": "tool_result",
                            "content": "     1→print(1)\n",
                        }
                    ],
                    toolUseResult={
                        "type": "text",
                        "file": {"filePath": "/x.py", "content": "print(1)\n"},
                    },
                    session=session,
                )
            )
        final = self.message_id()
        head, _, tail = answer.partition("\n\n")
        lines.append(
            self.assistant({"type": "text", "text": head}, message_id=final, session=session)
        )
        if tail:
            lines.append(
                self.assistant({"type": "text", "text": tail}, message_id=final, session=session)
            )
        return lines

    def image_prompt(self, text: str) -> dict[str, Any]:
        return self.user(
            [
                {"type": "text", "text": text},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1},
                },
            ]
        )

    def meta(self, text: str) -> dict[str, Any]:
        return self.user(text, isMeta=True)

    def slash_command(self, name: str, args: str = "") -> list[dict[str, Any]]:
        """A local slash command as Claude Code logs it: the caveat (meta), the command, and
        its output."""
        return [
            self.meta(
                "Caveat: The messages below were generated by the user while running local"
                " commands. DO NOT respond to these messages or otherwise consider them in your"
                " response unless the user explicitly asks you to."
            ),
            self.user(
                f"<command-name>/{name}</command-name>\n            <command-message>{name}"
                f"</command-message>\n            <command-args>{args}</command-args>"
            ),
            self.user(
                f"<local-command-stdout>Set model to {args or 'default'}</local-command-stdout>"
            ),
        ]

    def subagent(self, prompt: str, answer: str) -> list[dict[str, Any]]:
        """Sidechain lines of a Task subagent (older Claude Code kept them in the main file)."""
        return [
            self.user(prompt, sidechain=True, agentId="de30ae5d"),
            self.assistant({"type": "text", "text": answer}, sidechain=True, agentId="de30ae5d"),
        ]

    def compaction(self, summary: str) -> list[dict[str, Any]]:
        """``/compact``: the boundary, then the summary as a user line flagged isCompactSummary."""
        boundary = self._base("system")
        boundary.update(
            subtype="compact_boundary",
            content="Conversation compacted",
            isMeta=False,
            level="info",
            compactMetadata={"trigger": "manual", "preTokens": 155000},
        )
        return [
            boundary,
            self.user(
                "This session is being continued from a previous conversation that ran out of"
                f" context. The conversation is summarized below:\n{summary}",
                isCompactSummary=True,
                isVisibleInTranscriptOnly=True,
            ),
        ]

    def summary_line(self, text: str) -> dict[str, Any]:
        return {"type": "summary", "summary": text, "leafUuid": self.parent}

    def interrupted(self) -> dict[str, Any]:
        return self.user([{"type": "text", "text": "[Request interrupted by user]"}])


def new_session(directory: str, session_id: str | None = None, **kwargs: Any) -> Transcript:
    """A transcript file named by its session id in ``directory`` (a project folder)."""
    sid = session_id or str(uuid.uuid4())
    os.makedirs(directory, exist_ok=True)
    return Transcript(path=os.path.join(directory, f"{sid}.jsonl"), session_id=sid, **kwargs)


def resumed(earlier: Transcript, directory: str, session_id: str | None = None) -> Transcript:
    """A ``--resume`` of ``earlier``: a new session id whose file starts with the earlier
    session's lines, as they were (their own ``sessionId``)."""
    later = new_session(directory, session_id, cwd=earlier.cwd, git_branch=earlier.git_branch)
    with (
        open(earlier.path, encoding="utf-8") as source,
        open(later.path, "w", encoding="utf-8") as copy,
    ):
        copy.write(source.read())
    later.parent = earlier.parent
    later._clock = itertools.count(next(earlier._clock) + 60)
    later._messages = itertools.count(next(earlier._messages) + 1)
    return later


# ---- running the installed hooks as Claude Code does --------------------------------------


def installed_command(settings_path: str | os.PathLike[str], event: str) -> str:
    """The command memhoncho's install wrote for ``event`` in a Claude Code settings file."""
    with open(settings_path, encoding="utf-8") as handle:
        settings = json.load(handle)
    for group in settings["hooks"][event]:
        for hook in group["hooks"]:
            if "claude-code hook" in hook["command"]:
                return str(hook["command"])
    raise LookupError(f"no memhoncho hook for {event}")


def hook_input(t: Transcript, event: str, **extra: Any) -> bytes:
    """The JSON Claude Code writes on a hook's stdin."""
    data: dict[str, Any] = {
        "session_id": t.session_id,
        "transcript_path": t.path,
        "cwd": t.cwd,
        "permission_mode": "default",
        "hook_event_name": event,
    }
    if event == "Stop":
        data["stop_hook_active"] = False
    if event == "SessionStart":
        data["source"] = "startup"
    if event == "SessionEnd":
        data["reason"] = "prompt_input_exit"
    data.update(extra)
    return json.dumps(data).encode()


def run_hook(
    settings_path: str | os.PathLike[str],
    t: Transcript,
    event: str,
    env: dict[str, str] | None = None,
    **extra: Any,
) -> Any:
    """Run the installed hook for ``event`` as Claude Code does: the command through a shell,
    in the project folder, the hook's JSON on stdin. The finished process (exit code, output)."""
    import subprocess

    return subprocess.run(
        installed_command(settings_path, event),
        shell=True,
        input=hook_input(t, event, **extra),
        capture_output=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.fspath(settings_path))),
        timeout=120,
        check=False,
    )
