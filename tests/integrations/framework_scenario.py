"""The one scenario every framework integration must pass, with its framework's own test model.

A driver runs turns of a real agent of its framework; the scenario checks what reached Honcho
(the stand-in) through a real worker: every turn once and in order (and ``memhoncho audit``
agrees), a recall tool call answered by the stand-in, the sections in the model's input after
a refresh, the same run captured twice stored once, a failed run stored as not answered with
its error raised to the caller.
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
CHAT_QUERY = "What do you know about the user?"
DELIVERY_TIMEOUT_S = 180.0  # seconds for the worker to deliver every turn (a loaded machine)


class ModelFailure(RuntimeError):
    """What the test model raises on a turn with the fail cue."""


def answer_to(text: str) -> str:
    return f"answer to: {text}"


def model_reply(user_text: str, tool_result: str | None) -> tuple[str, Any]:
    """What every framework's test model does: ``("call", query)`` to call honcho_chat,
    ``("say", text)`` to answer; raises ModelFailure on the fail cue."""
    if FAIL_CUE in user_text:
        raise ModelFailure("the model failed")
    if MEMORY_CUE in user_text and tool_result is None:
        return "call", {"query": CHAT_QUERY}
    return "say", answer_to(user_text)


class Driver(Protocol):
    #: every model input of the driver's agent, rendered as text (instructions included)
    seen: list[str]

    def turn(self, conversation: str, text: str) -> str:
        """Run one turn of ``conversation``; the agent's final answer."""

    def repeat(self, conversation: str) -> None:
        """Run the conversation's last turn again as the same run (the framework's retry)."""


#: the ``scenario`` fixture: runs the scenario with the driver its argument builds from the host
Scenario = Callable[[Callable[[Host], Driver]], None]


def exercise(driver: Driver, host: Host, standin: HonchoStandIn, workspace_id: str) -> None:
    user = ids.peer_id(OWNER)
    host.call_tool("honcho_remember", {"content": FACT}, owner=OWNER)
    expected: dict[str, list[tuple[str, str, bool]]] = {c: [] for c in CONVERSATIONS}
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
    held_once_in_order(standin, workspace_id, expected)


def held(standin: HonchoStandIn, workspace_id: str, conversation: str) -> list[dict[str, Any]]:
    return standin.messages(workspace_id, ids.session_id(workspace_id, conversation))


def held_once_in_order(
    standin: HonchoStandIn, workspace_id: str, expected: dict[str, list[tuple[str, str, bool]]]
) -> None:
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


def audit_clean(expected: dict[str, list[tuple[str, str, bool]]]) -> None:
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
