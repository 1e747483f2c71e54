"""Claude Code's projects folder (``~/.claude/projects``) read into runs with the hooks' own
reader (``imports.claude_code``), so an imported session and a hooked one are the same
conversation with the same run ids: importing after the hooks stored nothing twice.

Every ``<session>.jsonl`` under the folder is one session; ``agent-*.jsonl`` files are
subagents' work (a tool call of a main turn): skipped. A resumed session's repeated history
belongs to the session it came from; the new session continues from it through a fork.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from memhoncho.imports import claude_code
from memhoncho.imports.extent import Extent
from memhoncho.imports.model import Conversation, Run

FORMAT = "claude-code"
SUBAGENT_PREFIX = "agent-"


def session_files(folder: Path) -> list[Path]:
    """The sessions' transcripts, oldest first (a resumed session after the one it resumes)."""
    found = [
        path
        for path in folder.rglob("*.jsonl")
        if path.is_file() and not path.name.startswith(SUBAGENT_PREFIX)
    ]
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))


def conversations(folder: Path, extent: Extent | None = None) -> Iterator[Conversation]:
    """Each session file's conversations (its own, and any earlier one its history repeats);
    ``extent`` counts the files' bytes as each is read."""
    files = session_files(folder)
    if extent is not None:
        extent.total = sum(_size(path) for path in files)
    for path in files:
        where = os.fspath(path.relative_to(folder))
        turns, read = claude_code.read_turns(
            path, claude_code.ReadState(), session_id=path.stem, final=True
        )
        own = Conversation(FORMAT, claude_code.conversation_id(path.stem), where)
        if read.parent_session_id is not None and read.fork_entry is not None:
            own.fork = (claude_code.conversation_id(read.parent_session_id), read.fork_entry)
        earlier: dict[str, Conversation] = {}
        for turn in turns:
            if turn.session_id == path.stem:
                into = own
            else:
                into = earlier.setdefault(
                    turn.session_id,
                    Conversation(FORMAT, turn.conversation_id, f"{where} (resumed history)"),
                )
            into.runs.append(
                Run(
                    conversation_id=turn.conversation_id,
                    run_id=turn.run_id,
                    ordinal=turn.ordinal,
                    prompt=turn.prompt,
                    answer=turn.answer,
                    happened_at=turn.prompt_at,
                )
            )
        if extent is not None:
            extent.read += _size(path)
        yield from earlier.values()
        yield own


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # gone since it was listed: read_turns says so
        return 0
