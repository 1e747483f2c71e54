"""The one scenario every framework integration must pass, with its framework's own test model.

A driver runs turns of a real agent of its framework; the scenario checks what reached Honcho
(the stand-in) through a real worker: every turn once and in order (and ``memhoncho audit``
agrees), a recall tool call answered by the stand-in, the sections in the model's input after
a refresh, the same run captured twice stored once, a replay the model answered differently
returned to the caller and stored as a new turn (the rule: never raise after the model answered),
a failed run stored as not answered with its error raised to the caller. A framework's other
paths (streaming, "yes" said twice, handoffs, prebuilt agents) run after it as ``more``, through
the same worker, checked with the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from memhoncho import cli, ids
from memhoncho.capture.host import Host
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.processes import wait_until

KEY = "sk-integrations-key"
OWNER = "ana@example.com"
CONVERSATIONS = ("conv-a", "conv-b", "conv-c")
TURNS = 20
FACT = "Ana is training for an April marathon."
MEMORY_CUE = " (check memory)"  # the test model calls honcho_chat first
FAIL_CUE = " (fail)"  # the test model raises
AGAIN = " (said again)"  # what a replay's answer adds: a real model answers differently
CHAT_QUERY = "What do you know about the user?"
DELIVERY_TIMEOUT_S = 180.0  # seconds for the worker to deliver every turn (a loaded machine)


class ModelFailure(RuntimeError):
    """What the test model raises on a turn with the fail cue."""


def answer_to(text: str) -> str:
    return f"answer to: {text}"


def model_reply(user_text: str, tool_result: str | None, again: bool = False) -> tuple[str, Any]:
    """What every framework's test model does: ``("call", query)`` to call honcho_chat,
    ``("say", text)`` to answer (another answer when ``again``: a replay); raises ModelFailure
    on the fail cue."""
    if FAIL_CUE in user_text:
        raise ModelFailure("the model failed")
    if MEMORY_CUE in user_text and tool_result is None:
        return "call", {"query": CHAT_QUERY}
    return "say", answer_to(user_text) + (AGAIN if again else "")


class Driver(Protocol):
    #: every model input of the driver's agent, rendered as text (instructions included)
    seen: list[str]

    def turn(self, conversation: str, text: str) -> str:
        """Run one turn of ``conversation``; the agent's final answer."""

    def repeat(self, conversation: str) -> None:
        """Run the conversation's last turn again as the same run (the framework's retry)."""

    def replay(self, conversation: str) -> str:
        """Run the conversation's last turn again the framework's way, the model answering
        differently (``model_reply(..., again=True)``); the answer the caller got."""


#: what a framework's own paths stored, per conversation: (peer, content, unanswered)
Held = dict[str, list[tuple[str, str, bool]]]
#: more of a framework's paths, run after the scenario by the same worker: what they stored
More = Callable[[Host], Held]


class Scenario(Protocol):
    """The ``scenario`` fixture: runs the scenario with the driver ``make(host)`` builds, then
    ``more`` (the framework's other paths) through the same worker, all checked at the end."""

    def __call__(self, make: Callable[[Host], Driver], more: More | None = None) -> None: ...


def exercise(
    driver: Driver, host: Host, standin: HonchoStandIn, workspace_id: str, more: More | None = None
) -> None:
    user = ids.peer_id(OWNER)
    host.call_tool("honcho_remember", {"content": FACT}, owner=OWNER)
    expected: Held = {c: [] for c in CONVERSATIONS}
    for i in range(TURNS):
        for conversation in CONVERSATIONS:
            text = f"{conversation} question {i}"
            if (conversation, i) == (CONVERSATIONS[0], 0):
                text += MEMORY_CUE
            answer = driver.turn(conversation, text)
            assert answer == answer_to(text)
            expected[conversation] += [(user, text, False), ("agent", answer, False)]

    # the model's recall tool call got the stand-in's answer, about the owner
    told = f"knows about {user}: {FACT}"
    assert any(told in seen for seen in driver.seen), "the tool result never reached the model"

    # the same run again: stored once
    driver.repeat(CONVERSATIONS[1])

    # a replay the model answered differently: the caller gets it, it is a new turn
    replayed_text = f"{CONVERSATIONS[1]} question {TURNS - 1}"
    replayed = driver.replay(CONVERSATIONS[1])
    assert replayed == answer_to(replayed_text) + AGAIN
    expected[CONVERSATIONS[1]] += [(user, replayed_text, False), ("agent", replayed, False)]

    # a failed run: its error reaches the caller, its input is stored as not answered
    failing = f"{CONVERSATIONS[2]} question {TURNS}{FAIL_CUE}"
    with pytest.raises(ModelFailure):
        driver.turn(CONVERSATIONS[2], failing)
    expected[CONVERSATIONS[2]].append((user, failing, True))
    after_failure = f"{CONVERSATIONS[2]} question {TURNS + 1}"
    answer = driver.turn(CONVERSATIONS[2], after_failure)
    expected[CONVERSATIONS[2]] += [(user, after_failure, False), ("agent", answer, False)]
    held_once_in_order(standin, workspace_id, expected)

    # the sections, after a refresh, are in the model's input (a first delivery refreshes too,
    # so they may have been there before: what matters is the refreshed text reaching the model)
    first = CONVERSATIONS[0]
    assert host.conversation_idle(first)
    rendered = wait_until(
        lambda: (text := host.sections(first).render()) and FACT in text and text,
        "the refreshed sections",
        timeout_s=DELIVERY_TIMEOUT_S,
    )
    before = len(driver.seen)
    last = f"{first} question {TURNS}"
    answer = driver.turn(first, last)
    assert any(rendered in seen for seen in driver.seen[before:]), "sections not in the prompt"
    expected[first] += [(user, last, False), ("agent", answer, False)]
    if more is not None:  # the same worker delivers them, audit checks them with the rest
        expected.update(more(host))
    held_once_in_order(standin, workspace_id, expected)


def held(standin: HonchoStandIn, workspace_id: str, conversation: str) -> list[dict[str, Any]]:
    return standin.messages(workspace_id, ids.session_id(workspace_id, conversation))


def held_once_in_order(standin: HonchoStandIn, workspace_id: str, expected: Held) -> None:
    """Wait for the worker, then: Honcho holds exactly the expected messages, in order, and
    ``memhoncho audit`` finds every conversation clean."""
    for conversation, messages in expected.items():
        wait_until(
            lambda c=conversation, n=len(messages): len(held(standin, workspace_id, c)) >= n,
            f"{conversation} delivered",
            timeout_s=DELIVERY_TIMEOUT_S,
        )
        got = [
            (m["peer_id"], m["content"], bool(m["metadata"].get("unanswered")))
            for m in held(standin, workspace_id, conversation)
        ]
        assert got == messages, conversation
    audit_clean(expected)


def audit_clean(expected: Held) -> None:
    """``memhoncho audit --json`` (the command, on this test's dirs): exit 0, all clean."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["audit", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0, report
    found = {c["conversation_id"]: c for c in report["conversations"]}
    assert set(found) == set(expected)
    for conversation, messages in expected.items():
        assert found[conversation]["held"] == len(messages)
        assert found[conversation]["delivered"] == len(messages)


def outbox_files(data_dir: Path) -> list[Path]:
    """The outbox files that hold something."""
    return sorted(p for p in data_dir.rglob("*.jsonl") if p.stat().st_size)


def only_record(data_dir: Path) -> dict[str, Any]:
    """The one record of the one outbox file (the test fails if there are more)."""
    (outbox,) = outbox_files(data_dir)
    (record,) = [json.loads(line.split(" ", 1)[1]) for line in outbox.read_text().splitlines()]
    return record  # type: ignore[no-any-return]


def seed_sections(host: Host, conversation: str, representation: str) -> str:
    """A refreshed snapshot for ``conversation`` (as a refresh writes it); its rendered text."""
    import time

    from memhoncho.models import Snapshot

    snapshot = Snapshot(
        conversation_id=conversation,
        workspace_id="w",
        user_peer_id="u",
        agent_peer_id="a",
        representation=representation,
        context_tokens=1200,
        fetched_at=time.time(),
    )
    host.deployment.store().write_snapshot(ids.conversation_key(conversation), snapshot)
    return host.sections(conversation).render()


def records(data_dir: Path) -> list[dict[str, Any]]:
    """Every record of every outbox file, in file then capture order."""
    return [
        json.loads(line.split(" ", 1)[1])
        for outbox in outbox_files(data_dir)
        for line in outbox.read_text().splitlines()
    ]
