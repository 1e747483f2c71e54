"""The Claude Code transcript reader: turns from a cursor, by the documented rules, on files
shaped like Claude Code's own (``memhoncho.testing.claude_code_transcript``)."""

from __future__ import annotations

import json
from pathlib import Path

from memhoncho.imports.claude_code import ReadState, Turn, read_turns
from memhoncho.testing.claude_code_transcript import Transcript, new_session, resumed


def read(
    t: Transcript, state: ReadState | None = None, *, final: bool = False, idle: bool = False
) -> tuple[list[Turn], ReadState]:
    return read_turns(t.path, state or ReadState(), session_id=t.session_id, final=final, idle=idle)


def pairs(turns: list[Turn]) -> list[tuple[str, str | None]]:
    return [(t.prompt, t.answer) for t in turns]


def test_a_multi_turn_session_with_tools_gives_each_prompt_and_its_final_answer(
    tmp_path: Path,
) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.turn("fix the bug", "Fixed it.\n\nThe off-by-one was in range().", tools=2))
    t.write(*t.turn("and add a test", "Added test_range.", tools=1))
    turns, state = read(t, idle=True)
    assert pairs(turns) == [
        ("fix the bug", "Fixed it.\nThe off-by-one was in range()."),
        ("and add a test", "Added test_range."),
    ]
    assert [t.ordinal for t in turns] == [0, 1]
    assert turns[0].event("ana")["inputs"] == [{"entry_id": 0, "text": "fix the bug"}]
    assert turns[1].event("ana")["outcome"]["answer"]["entry_id"] == 3
    assert all(not x.inherited and x.cwd == t.cwd for x in turns)
    assert turns[0].prompt_at and turns[0].answer_at and turns[0].prompt_at < turns[0].answer_at
    assert turns[0].event("ana")["happened_at"] == turns[0].prompt_at == "2026-01-20T11:57:17.000Z"
    assert state.offset == Path(t.path).stat().st_size and state.turns == 2


def test_a_turn_still_running_is_left_for_the_next_read(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    lines = t.turn("refactor", "Done.", tools=1)
    t.write(*lines[:3])  # the prompt, thinking, "Let me look": Claude is still working
    turns, state = read(t)
    assert turns == [] and state.offset == 0
    # Stop fired with text last: the turn counts (Stop means Claude has finished)
    turns, state = read(t, state, idle=True)
    assert turns[0].answer == "Let me look (0)."
    t2 = new_session(str(tmp_path))
    lines = t2.turn("refactor", "Done.", tools=1)
    t2.write(*lines[:4])  # ... and the tool call
    turns, state = read(t2, idle=True)
    assert turns == [] and state.offset == 0
    t2.write(*lines[4:])
    turns, state = read(t2, state, idle=True)
    assert pairs(turns) == [("refactor", "Done.")]


def test_reading_again_from_the_saved_state_reads_only_new_turns(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.turn("one", "1"))
    first, state = read(t, idle=True)
    again, same = read(t, state, idle=True)
    assert again == [] and same == state
    t.write(*t.turn("two", "2"))
    second, state = read(t, state, idle=True)
    assert pairs(second) == [("two", "2")] and second[0].ordinal == 1
    assert second[0].run_id != first[0].run_id


def test_a_lost_cursor_reads_the_same_turns_with_the_same_run_ids(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.turn("one", "1"), *t.turn("two", "2"))
    a, _ = read(t, idle=True)
    b, _ = read(t, ReadState(), idle=True)
    assert [x.event("o") for x in a] == [x.event("o") for x in b]


def test_a_line_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    lines = t.turn("q", "a")
    t.write(*lines[:-1])
    t.write(lines[-1], newline=False)
    turns, state = read(t, idle=True)
    assert turns == []
    with open(t.path, "a") as handle:
        handle.write("\n")
    turns, _ = read(t, state, idle=True)
    assert pairs(turns) == [("q", "a")]


def test_meta_commands_compaction_and_sidechains_are_not_turns(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.slash_command("model", "opus"))
    t.write(*t.turn("plan it", "Plan: three steps."))
    t.write(*t.subagent("search the repo for range()", "Found 3 uses."))
    t.write(t.meta("Stop hook feedback:\n[memhoncho]: ok"))
    t.write(*t.compaction("The user asked for a plan."), t.summary_line("Planning"))
    t.write(*t.turn("go on", "Step one done."))
    turns, _ = read(t, idle=True)
    assert pairs(turns) == [("plan it", "Plan: three steps."), ("go on", "Step one done.")]
    assert [x.ordinal for x in turns] == [0, 1]


def test_an_answered_slash_command_is_stored_as_its_command(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(
        t.user(
            "<command-message>review</command-message>\n<command-name>/review</command-name>\n"
            "<command-args>PR 12</command-args>"
        )
    )
    t.write(t.meta("Review the pull request PR 12 carefully..."))
    t.write(t.assistant({"type": "text", "text": "Looks good."}))
    turns, _ = read(t, idle=True)
    assert pairs(turns) == [("/review PR 12", "Looks good.")]


def test_an_image_leaves_a_note_and_never_its_bytes(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(t.image_prompt("what is in this screenshot?"))
    t.write(t.assistant({"type": "text", "text": "A login form."}))
    turns, _ = read(t, idle=True)
    assert (
        turns[0].prompt
        == "what is in this screenshot?\n[image not stored: memhoncho keeps text only]"
    )
    assert "iVBOR" not in json.dumps(turns[0].event(None))


def test_an_interrupted_turn_is_unanswered_only_when_the_session_ends(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    lines = t.turn("long job", "never said", tools=1)
    t.write(*lines[:4], t.interrupted())
    turns, state = read(t, idle=True)
    assert turns == []
    turns, state = read(t, state, final=True)
    assert pairs(turns) == [("long job", "Let me look (0).")]
    t2 = new_session(str(tmp_path))
    t2.write(t2.user("hello?"), t2.interrupted())
    turns, _ = read(t2, final=True)
    assert pairs(turns) == [("hello?", None)]
    assert turns[0].event("o")["outcome"] == {"status": "unanswered"}


def test_a_local_command_alone_at_the_end_is_not_a_turn(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.turn("q", "a"), *t.slash_command("clear"))
    turns, state = read(t, final=True)
    assert pairs(turns) == [("q", "a")] and state.turns == 1


def test_a_resumed_session_names_its_parent_and_fork_point_and_keeps_the_history_there(
    tmp_path: Path,
) -> None:
    first = new_session(str(tmp_path))
    first.write(*first.turn("one", "1"), *first.turn("two", "2"))
    earlier, _ = read(first, idle=True)
    later = resumed(first, str(tmp_path))
    later.write(*later.turn("three", "3"))
    turns, state = read(later, idle=True)
    assert [(x.session_id, x.inherited) for x in turns] == [
        (first.session_id, True),
        (first.session_id, True),
        (later.session_id, False),
    ]
    assert [x.run_id for x in turns[:2]] == [x.run_id for x in earlier]
    assert [x.event("o") for x in turns[:2]] == [x.event("o") for x in earlier]
    assert state.parent_session_id == first.session_id and state.fork_entry == 3
    assert turns[2].event("o")["inputs"][0]["entry_id"] == 4


def test_a_replaced_file_is_read_from_the_start(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    t.write(*t.turn("one", "1"), *t.turn("two", "2"))
    _, state = read(t, idle=True)
    Path(t.path).write_text("")
    t.write(*t.turn("fresh", "f"))
    turns, _ = read(t, state, idle=True)
    assert pairs(turns) == [("fresh", "f")] and turns[0].ordinal == 0


def test_a_timestamp_without_a_zone_is_left_out_not_refused(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    lines = t.turn("q", "a")
    lines[0]["timestamp"] = "2026-01-20 11:57:17"
    t.write(*lines)
    turns, _ = read(t, idle=True)
    assert "happened_at" not in turns[0].event("o")


def test_torn_and_foreign_lines_do_not_stop_the_reading(tmp_path: Path) -> None:
    t = new_session(str(tmp_path))
    with open(t.path, "a") as handle:
        handle.write('{"type": "user", "message": {"ro\n[1, 2]\n\n')
    t.write(
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "queue-operation", "operation": "dequeue"},
    )
    t.write(*t.turn("q", "a"))
    turns, _ = read(t, idle=True)
    assert pairs(turns) == [("q", "a")]
