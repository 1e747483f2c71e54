"""Single Claude Code hook calls, run as Claude Code runs them (the command ``install`` wrote,
through a shell, the hook's JSON on stdin), without a relay: what ``SessionStart`` prints (from
the local snapshot only, never a Honcho call), and a hook that cannot capture now (a
conversation's outbox at capacity, the database down) exits 0, says why in the log and in both
status views, keeps its cursor before the turns it left, and the next hook captures them once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.imports.claude_code import conversation_id
from memhoncho.integrations.claude_code import cursor
from memhoncho.recall import memory
from memhoncho.recall.memory import Snapshot
from memhoncho.store import close_stores
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.claude_code_transcript import Transcript, new_session, run_hook
from memhoncho.testing.config import point_at_standin, write_api_key, write_settings
from memhoncho.testing.proxy import TcpProxy

KEY = "sk-claude-code-key"


def memhoncho(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config_dir)]
        + ["--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def install(tmp_path: Path, config_dir: Path, data_dir: Path) -> Callable[[str, str], Path]:
    """``install(project, owner)``: ``memhoncho claude-code install`` into a project's settings;
    the settings file Claude Code reads."""

    def run(project: str, owner: str) -> Path:
        root = tmp_path / project
        memhoncho(
            config_dir,
            data_dir,
            *("claude-code", "install", "--project", str(root), "--owner", owner),
        )
        return root / ".claude" / "settings.json"

    return run


def hook(settings: Path, t: Transcript, event: str) -> subprocess.CompletedProcess[bytes]:
    done: subprocess.CompletedProcess[bytes] = run_hook(settings, t, event)
    assert done.returncode == 0, done.stderr
    return done


# ---- SessionStart: the sections as additional context, from the snapshot only -------------


def _seed_snapshot(deployment: Deployment, session_id: str, owner: str, text: str) -> None:
    """A snapshot as a refresh leaves it: the owner's representation, cached locally."""
    settings = deployment.settings()
    deployment.store().write_snapshot(
        ids.conversation_key(conversation_id(session_id)),
        Snapshot(
            conversation_id=conversation_id(session_id),
            workspace_id=settings.workspace_id,
            user_peer_id=ids.peer_id(owner),
            agent_peer_id=settings.agent_peer_id,
            representation=text,
            summary="Ana fixed a flaky test.",
            context_tokens=settings.context_tokens,
            fetched_at=time.time(),
        ),
    )


def _additional_context(done: subprocess.CompletedProcess[bytes]) -> str:
    """What Claude Code takes from a SessionStart hook's stdout: one JSON object whose
    ``hookSpecificOutput`` names the event and carries ``additionalContext``."""
    output = json.loads(done.stdout)
    assert set(output) == {"hookSpecificOutput"}
    specific = output["hookSpecificOutput"]
    assert set(specific) == {"hookEventName", "additionalContext"}
    assert specific["hookEventName"] == "SessionStart"
    assert isinstance(specific["additionalContext"], str)
    return str(specific["additionalContext"])


@pytest.mark.standin(api_key=KEY)
def test_session_start_prints_the_cached_memory_as_additional_context_without_calling_honcho(
    tmp_path: Path,
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    install: Callable[[str, str], Path],
) -> None:
    point_at_standin(config_dir, standin, workspace_id, KEY)
    deployment = Deployment(config_dir, data_dir)
    ana, bo = install("shop", "ana@example.com"), install("garden", "bo@example.com")
    projects = tmp_path / "claude" / "projects"
    first = new_session(str(projects / "-home-ana-shop"))
    _seed_snapshot(deployment, first.session_id, "ana@example.com", "Ana prefers tabs.")
    expected = memory.sections(deployment, conversation_id(first.session_id)).render()
    assert "Ana prefers tabs." in expected

    own = _additional_context(hook(ana, first, "SessionStart"))
    assert own == expected  # this session's own snapshot
    first.write(*first.turn("make the test pass", "Done."))
    prompt = hook(ana, first, "UserPromptSubmit")
    assert prompt.stdout == b""  # only SessionStart prints: one copy of memory per session
    assert hook(ana, first, "Stop").stdout == b""

    second = new_session(str(projects / "-home-ana-shop"))  # no snapshot of its own yet
    assert _additional_context(hook(ana, second, "SessionStart")) == expected  # the owner's newest
    strangers = new_session(str(projects / "-home-bo-garden"))  # Bo has no memory cached
    done = hook(bo, strangers, "SessionStart")
    assert done.stdout == b"", "another owner's memory, or an empty context, was printed"
    assert standin.request_count() == 0  # no hook called Honcho
    assert cursor.last_errors(data_dir) == []


# ---- a hook that cannot capture now ----------------------------------------------------------


class Cause:
    """What stops a hook from capturing, turned on and off between hook calls."""

    code: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


class OutboxAtCapacity(Cause):
    """The conversation's outbox holds ``max_pending_batches`` undelivered turns (no worker
    runs); the operator raises the limit."""

    code = "ERR_OUTBOX_CAPACITY"

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        _settings(config_dir, max_pending_batches=3)

    def start(self) -> None:
        pass  # two turns pending: the third is captured, the fourth refused

    def stop(self) -> None:
        _settings(self.config_dir, max_pending_batches=100)


class StoreDown(Cause):
    """The PostgreSQL store unreachable: its connections go through a proxy taken down."""

    code = "ERR_STORE_UNAVAILABLE"

    def __init__(self, config_dir: Path, url: str) -> None:
        parts = urlsplit(url)
        self.proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
        _settings(config_dir, store_url=self.proxy.url_for(url))

    def start(self) -> None:
        self.proxy.down()

    def stop(self) -> None:
        self.proxy.up()


def _settings(config_dir: Path, **values: Any) -> None:
    """Settings naming a Honcho that refuses: a hook never needs it."""
    write_settings(config_dir, base_url="http://127.0.0.1:9", workspace_id="w", **values)
    write_api_key(config_dir, KEY)


@pytest.fixture(params=["outbox at capacity", "store down"])
def cause(request: pytest.FixtureRequest, config_dir: Path) -> Iterator[Cause]:
    if request.param == "outbox at capacity":
        yield OutboxAtCapacity(config_dir)
        return
    down = StoreDown(config_dir, request.getfixturevalue("postgres_url"))
    try:
        yield down
    finally:
        down.proxy.close()
        close_stores()


def test_a_hook_that_cannot_capture_exits_0_says_why_and_leaves_the_turns_for_the_next(
    tmp_path: Path,
    config_dir: Path,
    data_dir: Path,
    cause: Cause,
    install: Callable[[str, str], Path],
) -> None:
    settings = install("shop", "ana@example.com")
    t = new_session(str(tmp_path / "claude" / "projects" / "-home-ana-shop"))
    t.write(*t.turn("first", "First answer."))
    t.write(*t.turn("second", "Second answer."))
    hook(settings, t, "Stop")  # two turns captured: the cursor after them
    before = cursor.load(data_dir, t.session_id).read
    assert before.offset == Path(t.path).stat().st_size
    t.write(*t.turn("third", "Third answer.", tools=1))
    t.write(*t.turn("fourth", "Fourth answer."))

    cause.start()
    failed = hook(settings, t, "Stop")
    assert failed.stdout == b""
    said = failed.stderr.decode()  # memhoncho's log: the hook's stderr
    assert "claude_code_hook_failed" in said and cause.code in said
    assert cursor.load(data_dir, t.session_id).read == before  # not past what it left
    assert [e["code"] for e in cursor.last_errors(data_dir)] == [cause.code]
    status = json.loads(memhoncho(config_dir, data_dir, "status", "--json").stdout)
    assert [(e["event"], e["code"]) for e in status["hooks"]["last_errors"]] == [
        ("Stop", cause.code)
    ]
    view = json.loads(
        memhoncho(
            config_dir,
            data_dir,
            *("claude-code", "status", "--project", str(settings.parent.parent), "--json"),
        ).stdout
    )
    assert [e["code"] for e in view["last_errors"]] == [cause.code]

    cause.stop()
    hook(settings, t, "Stop")  # the cause gone: the turns it left, captured now
    hook(settings, t, "Stop")  # and a hook that fires twice stores nothing twice
    assert cursor.load(data_dir, t.session_id).read.offset == Path(t.path).stat().st_size
    assert _texts(config_dir, data_dir, t) == [
        "first",
        "First answer.",
        "second",
        "Second answer.",
        "third",
        "Third answer.",
        "fourth",
        "Fourth answer.",
    ]
    assert len(cursor.last_errors(data_dir)) == 1  # nothing failed after the cause went


def _texts(config_dir: Path, data_dir: Path, t: Transcript) -> list[str]:
    """The outbox's messages of the session's conversation, record by record, in order."""
    close_stores()
    store = Deployment(config_dir, data_dir).store()
    texts: list[str] = []
    for record in store.records(ids.conversation_key(conversation_id(t.session_id))):
        for message in record["messages"]:
            texts.append(message["text"])
    return texts
