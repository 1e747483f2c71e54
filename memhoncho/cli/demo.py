"""``memhoncho demo``: the whole loop, end to end, on one machine, in under a minute.

It starts the Honcho stand-in (or uses the Honcho named by ``base_url`` and the key), a real
Celery worker and beat on the embedded broker, captures a scripted conversation, forks it,
waits for delivery, refreshes the representation, prints the prompt sections, calls each
recall tool and ends with the status view. Each step prints what it proves; any failed step
makes the exit code non-zero. Every process it started is stopped, also on Ctrl-C.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, initialise
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.processes import STOP_TIMEOUT_S, CeleryProcess, memhoncho_env

DELIVERY_TIMEOUT_S = 45.0  # seconds to wait for every message to reach Honcho
POLL_S = 0.1  # seconds between checks while waiting
DEMO_WORKSPACE = "memhoncho-demo"
DEMO_KEY = "demo-key"  # the stand-in accepts any key
PARENT = "demo-conversation"
OWNER = "ana@example.com"
LONG_TEXT_CHARS = 30_000  # longer than Honcho's 25,000-character limit: split into two parts


class DemoFailed(Exception):
    """A step of the demo did not prove what it claims."""


@dataclass
class Demo:
    data_dir: Path
    honcho_url: str | None = None
    honcho_key: str | None = None
    out: Callable[[str], None] = print
    stack: ExitStack = field(default_factory=ExitStack)
    started: float = field(default_factory=time.monotonic)
    #: this run's conversations: a kept data dir can hold any number of demos (run it twice)
    parent: str = field(default_factory=lambda: f"{PARENT}-{uuid.uuid4().hex[:8]}")

    @property
    def child(self) -> str:
        return f"{self.parent}-fork"

    # ---- presentation -------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.started:5.1f}s] {text}")

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.say(f"{title} ...")
        yield
        self.say(f"  ok: {title}")

    # ---- the run ------------------------------------------------------------------------

    def run(self) -> None:
        with self.stack:
            self._setup()
            host = Host(self.config_dir, self.data_dir)
            self.stack.callback(host.close, 5)
            expected = self._capture(host)
            self._fork_and_capture(host, expected)
            self._wait_delivered(expected)
            self._memory(host)
            self._tools(host)
            self._status()

    def start(self) -> None:
        """Start Honcho (the stand-in unless one was named), a worker and beat on the embedded
        broker, for a caller of its own (the framework examples); stopped with ``stack``."""
        self._setup()

    def _setup(self) -> None:
        self.config_dir = self.data_dir / "config"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        with self.step("starting Honcho"):
            if self.honcho_url is None:
                from memhoncho.testing import HonchoStandIn

                standin = HonchoStandIn(llm=True)
                standin.start()
                self.stack.callback(standin.stop)
                self.honcho_url, self.honcho_key = standin.url, DEMO_KEY
                self.say(f"  the local Honcho stand-in (a test double) at {standin.url}")
            else:
                self.say(f"  the Honcho at {self.honcho_url}")
        settings = {
            "workspace_id": DEMO_WORKSPACE,
            "base_url": self.honcho_url,
            "sweep_interval_s": 5,
            "refresh_interval_s": 5,
        }
        write_settings(self.config_dir, **settings)
        write_api_key(self.config_dir, self.honcho_key or "")
        self.deployment = Deployment(self.config_dir, self.data_dir)
        initialise(self.data_dir)  # as `memhoncho init`: workers and beat refuse a new folder
        env = memhoncho_env(config_dir=self.config_dir, data_dir=self.data_dir, api_key=None)
        with self.step("starting a Celery worker and beat on the embedded filesystem broker"):
            worker = CeleryProcess("worker", env, concurrency=2, name="demo-worker")
            beat = CeleryProcess("beat", env, name="demo-beat")
            self.stack.callback(self._stop, [worker, beat])
            for process in (worker, beat):
                process.start(wait=False)
            worker.wait_ready()
            beat.wait_ready()

    def _stop(self, processes: list[CeleryProcess]) -> None:
        """Stop the worker and beat together, saying so: a warm shutdown takes a few seconds."""
        self.say(
            "stopping the worker and beat (warm shutdown: the worker finishes what it is"
            " doing and its pool processes exit) ..."
        )
        for process in processes:  # all signalled at once, so the waits overlap
            if process.process is not None and process.process.poll() is None:
                process.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            if process.process is not None:
                try:
                    process.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.say(f"  {process.name} did not stop in time: killed")
            process.stop()  # kills one still running, reaps stray children, closes its log
            self.say(f"  {process.name} stopped")

    def _capture(self, host: Host) -> list[tuple[str, str]]:
        """Capture the scripted runs; returns the expected (peer, text) in Honcho order."""
        runs: list[dict[str, Any]] = [
            _run(
                1,
                "I'm Ana. I'm training for a marathon in April.",
                "Great goal! How far do you run now?",
            ),
            _run(3, "About 30 km a week. My knee hurts after long runs.", None),
            _run(5, "Can you suggest a stretching routine?", "Try calf raises and hip openers."),
            _run(
                7, "Here are my training notes: " + "tempo run, easy run, rest. " * 1100, "Noted."
            ),
        ]
        expected: list[tuple[str, str]] = []
        user_peer = ids.peer_id(OWNER)
        with self.step(f"capturing {len(runs)} runs (one unanswered, one long text)"):
            for run in runs:
                result = host.capture({"conversation_id": self.parent, "owner": OWNER, **run})
                if result.status != "captured":
                    raise DemoFailed(f"capture answered {result.status}")
                for item in run["inputs"]:
                    expected.extend((user_peer, part) for part in _parts(item["text"]))
                if run["outcome"]["status"] == "answered":
                    text = run["outcome"]["answer"]["content"][0]["text"]
                    expected.append(("agent", text))
            again = host.capture({"conversation_id": self.parent, "owner": OWNER, **runs[0]})
            if again.status != "duplicate":
                raise DemoFailed("capturing the same run twice was not recognised")
            self.say(
                f"  every run fsynced to the outbox before capture returned; {len(expected)}"
                " messages expected (the long text split into parts); a repeated run is"
                " a 'duplicate'"
            )
        return expected

    def _fork_and_capture(self, host: Host, expected: list[tuple[str, str]]) -> None:
        with self.step("forking the conversation at entry 6 and continuing the fork"):
            host.conversation_forked(self.parent, self.child, 6)
            run = _run(9, "In the fork: what about swimming instead?", "Swimming is easy on knees.")
            result = host.capture({"conversation_id": self.child, "owner": OWNER, **run})
            if result.status != "captured":
                raise DemoFailed(f"capture in the fork answered {result.status}")
        # The parent's messages at or before the fork point (entries 1..6: five messages).
        self.child_expected = expected[:5] + [
            (ids.peer_id(OWNER), run["inputs"][0]["text"]),
            ("agent", run["outcome"]["answer"]["content"][0]["text"]),
        ]

    def _wait_delivered(self, expected: list[tuple[str, str]]) -> None:
        client = adapter.read_client(self.deployment.honcho_target())
        parent_session = ids.session_id(DEMO_WORKSPACE, self.parent)
        with self.step("waiting for the workers to deliver everything to Honcho"):
            deadline = time.monotonic() + DELIVERY_TIMEOUT_S
            while True:
                got = _messages(client, parent_session)
                if len(got) >= len(expected) or time.monotonic() > deadline:
                    break
                time.sleep(POLL_S)
            _check_same("parent", got, expected)
            outbox_ids = [m["metadata"].get(OUTBOX_ID_KEY) for m in got]
            if len(set(outbox_ids)) != len(outbox_ids):
                raise DemoFailed("a message was delivered twice")
            self.say(f"  parent: {len(got)} messages in Honcho, in capture order, each once")
            child_session = None
            while time.monotonic() < deadline:
                ledger = _ledger(self.deployment, self.child)
                child_session = ledger.get("session_id") if ledger else None
                if child_session and len(_messages(client, child_session)) >= len(
                    self.child_expected
                ):
                    break
                time.sleep(POLL_S)
            if not child_session:
                raise DemoFailed("the fork got no Honcho session")
            child = _messages(client, child_session)
            _check_same("fork", child, self.child_expected)
            fork = (ledger or {}).get("fork") or {}
            self.say(
                f"  fork: Honcho session began as a '{fork.get('outcome')}' of the parent at"
                f" entry {fork.get('anchor_entry')}, then its own run: {len(child)} messages"
            )

    def _memory(self, host: Host) -> None:
        with self.step("remembering a fact, refreshing the representation, rendering sections"):
            host.call_tool(
                "honcho_remember",
                {"content": "Ana is training for an April marathon and has a sore knee."},
                owner=OWNER,
            )
            cache = self.deployment.layout.cache(ids.conversation_key(self.parent))
            before = cache.stat().st_mtime_ns if cache.exists() else 0
            host.conversation_idle(self.parent)
            deadline = time.monotonic() + DELIVERY_TIMEOUT_S
            while time.monotonic() < deadline:
                if cache.exists() and cache.stat().st_mtime_ns != before:
                    sections = host.sections(self.parent)
                    if "marathon" in json.dumps(_jsonable(sections)):
                        break
                time.sleep(POLL_S)
            sections = _jsonable(host.sections(self.parent))
            if "marathon" not in json.dumps(sections):
                raise DemoFailed("the prompt sections do not show the remembered fact")
            self.say(
                f"  prompt sections ({sections.get('status')}, {sections.get('tokens')} tokens),"
                " rendered from the local cache with no network call:"
            )
            for section in sections.get("sections", []):
                self.out(f"      <{section['name']}>")
                for line in (section["text"] or "(empty: nothing derived for it yet)").splitlines():
                    self.out(f"        {line}")
                self.out(f"      </{section['name']}>")

    def _tools(self, host: Host) -> None:
        with self.step("calling each recall tool as the model would"):
            for name, arguments in (
                ("honcho_search", {"query": "knee"}),
                ("honcho_chat", {"query": "What is Ana training for?"}),
                (
                    "honcho_remember",
                    {"content": "Ana prefers morning runs.", "conversation_id": self.parent},
                ),
            ):
                result = host.call_tool(name, arguments, owner=OWNER)
                preview = json.dumps(_jsonable(result))[:300]
                self.say(f"  {name}({json.dumps(arguments)}) -> {preview}")

    def _status(self) -> None:
        from memhoncho.status.view import render_table, status_view

        with self.step("the status view"):
            view = status_view(self.deployment)
            for line in render_table(view).splitlines():
                self.out("      " + line)


def _run(entry: int, user: str, answer: str | None) -> dict[str, Any]:
    outcome: dict[str, Any] = (
        {
            "status": "answered",
            "answer": {"entry_id": entry + 1, "content": [{"type": "text", "text": answer}]},
        }
        if answer is not None
        else {"status": "unanswered"}
    )
    return {
        "run_id": f"run-{entry}",
        "inputs": [{"entry_id": entry, "text": user}],
        "outcome": outcome,
    }


def _parts(text: str) -> list[str]:
    from memhoncho.capture.record import split_text

    return split_text(text, 25_000)


def _messages(client: Any, session_id: str) -> list[dict[str, Any]]:
    try:
        return adapter.list_messages(client, session_id)
    except Exception:  # the session may not exist yet
        return []


def _ledger(deployment: Deployment, conversation_id: str) -> dict[str, Any] | None:
    path = deployment.layout.ledger(ids.conversation_key(conversation_id))
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _check_same(name: str, got: list[dict[str, Any]], expected: list[tuple[str, str]]) -> None:
    pairs = [(m["peer_id"], m["content"]) for m in got]
    if pairs != expected:
        raise DemoFailed(
            f"{name}: Honcho holds {len(pairs)} messages, expected {len(expected)} in order"
        )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def main(data_dir: str | None, honcho_url: str | None, honcho_key: str | None) -> int:
    owned = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="memhoncho-demo-")) if owned else Path(data_dir or ".")
    demo = Demo(root, honcho_url=honcho_url, honcho_key=honcho_key)
    demo.say(f"memhoncho demo in {root}: conversation {demo.parent} (and its fork)")
    try:
        demo.run()
    except DemoFailed as exc:
        demo.say(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        demo.say("interrupted; every process the demo started has been stopped")
        return 130
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    demo.say(
        "demo complete: captured durably, delivered in order exactly once, forked,"
        " remembered, recalled"
    )
    return 0
