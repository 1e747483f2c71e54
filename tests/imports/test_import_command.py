"""``memhoncho import`` as a user runs it: the JSON summary, dry runs, the options, and bad
input (a truncated zip, a broken line, an export that ends early, an unknown shape) reported
with where it is, the rest imported."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.imports import source
from memhoncho.imports.extent import Extent
from memhoncho.testing import exports
from memhoncho.testing.terminal import run_on_terminal


def memhoncho(deployment: Deployment, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "memhoncho",
            "--config-dir",
            str(deployment.config_dir),
            "--data-dir",
            str(deployment.data_dir),
            "import",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def summary_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(done.stdout)


def records(deployment: Deployment, conversation: str) -> list[Any]:
    return deployment.store().records(ids.conversation_key(conversation))


def lines(tmp_path: Path, count: int = 3, turns: int = 2) -> Path:
    return exports.write_lines(
        tmp_path / "history.jsonl", [exports.jsonl_conversation(c, turns) for c in range(count)]
    )


def test_a_dry_run_says_what_it_would_store_per_conversation_and_stores_nothing(
    deployment: Deployment, tmp_path: Path
) -> None:
    done = memhoncho(deployment, str(lines(tmp_path)), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    summary = summary_of(done)
    assert summary["totals"] == {"would-capture": 6} and summary["dry_run"]
    first = summary["conversations"][0]
    assert first["conversation_id"] == "jl-0" and first["where"] == "line 1"
    assert first["skipped_messages"] == {"system message": 1}
    assert records(deployment, "jl-0") == []


def test_a_dry_run_of_a_longer_export_counts_what_is_stored_already_as_the_import_will(
    deployment: Deployment, tmp_path: Path
) -> None:
    (tmp_path / "earlier").mkdir()
    (tmp_path / "later").mkdir()
    first = memhoncho(deployment, str(lines(tmp_path / "earlier", count=3, turns=2)), "--json")
    assert summary_of(first)["totals"] == {"captured": 6}
    longer = str(lines(tmp_path / "later", count=4, turns=3))  # a turn more each, and a fourth
    dry = memhoncho(deployment, longer, "--dry-run", "--json")
    assert summary_of(dry)["totals"] == {"duplicate": 6, "would-capture": 6}
    assert [c.get("duplicate", 0) for c in summary_of(dry)["conversations"]] == [2, 2, 2, 0]
    done = memhoncho(deployment, longer, "--json")
    assert summary_of(done)["totals"] == {"duplicate": 6, "captured": 6}  # as the dry run said


def test_since_limit_and_a_prefix_choose_what_is_imported_and_under_which_ids(
    deployment: Deployment, tmp_path: Path
) -> None:
    # conversation c's turns happen on day c after START: --since the second day skips the first
    since = (exports.START.replace(day=exports.START.day + 1)).isoformat()
    done = memhoncho(
        deployment,
        str(lines(tmp_path)),
        "--since",
        since,
        "--limit",
        "2",
        "--conversation-prefix",
        "old-",
        "--owner",
        "ana",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert summary_of(done)["totals"] == {"before-since": 2, "captured": 2}
    assert records(deployment, "jl-1") == [] and len(records(deployment, "old-jl-1")) == 2
    assert records(deployment, "old-jl-2") == []  # past --limit
    assert records(deployment, "old-jl-1")[0]["owner"] == "ana"


def test_a_broken_line_is_reported_where_it_is_and_the_other_lines_are_imported(
    deployment: Deployment, tmp_path: Path
) -> None:
    path = lines(tmp_path)
    good = path.read_text().splitlines()
    path.write_text(
        "\n".join([good[0], '{"id": "x", "messages": [', good[1], '{"no": 1}', good[2]]) + "\n"
    )
    done = memhoncho(deployment, str(path), "--json")
    assert done.returncode == 1
    summary = summary_of(done)
    assert summary["broken"] == [
        {"where": "line 2", "reason": "not valid JSON"},
        {"where": "line 4", "reason": "not a conversation line (no messages list)"},
    ]
    assert summary["totals"] == {"captured": 6, "broken": 2}


def test_an_export_that_ends_early_imports_what_came_before_and_says_where_it_broke(
    deployment: Deployment, tmp_path: Path
) -> None:
    path = exports.write_array(
        tmp_path / "conversations.json", [exports.claude_ai_conversation(c, 2) for c in range(3)]
    )
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 300])  # cut inside the last conversation
    done = memhoncho(deployment, str(path), "--json")
    assert done.returncode == 1
    summary = summary_of(done)
    assert summary["totals"] == {"captured": 4, "broken": 1}
    assert summary["broken"][0]["where"] == "after conversation 1"
    again = memhoncho(deployment, str(path), "--json")  # the rerun stores nothing twice
    assert summary_of(again)["totals"] == {"duplicate": 4, "broken": 1}


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "ERR_IMPORT_UNREADABLE"),
        (lambda p: p.write_text('[{"title": "x", "messages": []}]'), "ERR_IMPORT_FORMAT"),
        (lambda p: p.write_text("hello"), "ERR_IMPORT_FORMAT"),
    ],
    ids=["truncated-zip", "unknown-array", "not-json"],
)
def test_an_export_that_cannot_be_read_at_all_is_refused_with_exit_2_and_nothing_stored(
    deployment: Deployment, tmp_path: Path, make: Any, code: str
) -> None:
    path = tmp_path / ("export.zip" if code == "ERR_IMPORT_UNREADABLE" else "conversations.json")
    make(path)
    done = memhoncho(deployment, str(path))
    assert done.returncode == 2
    assert json.loads(done.stderr)["code"] == code


def test_the_status_view_shows_the_newest_imports_progress(
    deployment: Deployment, tmp_path: Path
) -> None:
    from memhoncho.status.view import status_view

    assert status_view(deployment)["import"] == {"state": "ok", "last": None}
    done = memhoncho(deployment, str(lines(tmp_path)), "--owner", "ana")
    assert done.returncode == 0, done.stderr
    last = status_view(deployment)["import"]["last"]
    assert last["state"] == "finished" and last["format"] == "jsonl"
    assert (last["conversations"], last["totals"], last["broken"]) == (3, {"captured": 6}, 0)
    assert last["started_at"] <= last["updated_at"]


def _zipped(tmp_path: Path, conversations: int) -> Path:
    json_path = exports.write_array(
        tmp_path / "conversations.json",
        [exports.chatgpt_conversation(c, 2) for c in range(conversations)],
    )
    zipped = tmp_path / "export.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(json_path, "conversations.json")
        archive.writestr("chat.html", "<html></html>")
    return zipped


def test_the_export_is_measured_in_bytes_read_as_it_is_read_once(tmp_path: Path) -> None:
    """The bar's percentage and ETA: a file by its position, a zip by its conversations.json's
    uncompressed size, a folder by whole session files; never a second read."""
    zipped = _zipped(tmp_path, 600)  # past the 1 MiB reads (imports/bounded.py): seen moving
    member = zipfile.ZipFile(zipped).getinfo("conversations.json").file_size
    jsonl = lines(tmp_path, count=3000)  # past one 1 MiB read too
    projects = tmp_path / "projects" / "-home-ana"
    projects.mkdir(parents=True)
    (projects / "s1.jsonl").write_text('{"type": "summary"}\n')
    (projects / "s2.jsonl").write_text('{"type": "summary"}\n{"type": "summary"}\n')
    cases = [
        (zipped, "chatgpt", member),
        (jsonl, "jsonl", jsonl.stat().st_size),
        (tmp_path / "projects", "claude-code", 20 + 40),
    ]
    for path, fmt, size in cases:
        extent = Extent()
        seen = [(extent.done(), extent.total) for _ in source.read(path, fmt, extent)]
        assert {total for _, total in seen} == {size}, path
        done = [d for d, _ in seen]
        assert done == sorted(done) and done[-1] == size, path
        assert fmt == "claude-code" or done[0] < size, path  # moved as it went


def _import_on_a_terminal(deployment: Deployment, *argv: str) -> tuple[int, str, str]:
    """``memhoncho import`` with stderr on a pseudo-terminal: (exit, stdout, the terminal)."""
    done, terminal = run_on_terminal(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(deployment.config_dir)]
        + ["--data-dir", str(deployment.data_dir), "import", *argv],
        stream="stderr",
        columns=160,
    )
    return done.returncode, done.stdout.decode(), terminal


def test_on_a_terminal_a_bar_shows_the_percentage_and_eta_and_json_or_a_pipe_show_none(
    deployment: Deployment, tmp_path: Path
) -> None:
    zipped = _zipped(tmp_path, 3)
    code, out, terminal = _import_on_a_terminal(deployment, str(zipped), "--owner", "ana")
    assert code == 0, terminal
    assert "100%" in terminal and "ETA" in terminal, terminal
    assert "3 conversations" in terminal and "turns/s" in terminal
    assert "6 captured" in out  # the summary on stdout, as before

    code, out, terminal = _import_on_a_terminal(deployment, str(zipped), "--owner", "ana", "--json")
    assert code == 0, terminal
    assert terminal == "" and json.loads(out)["totals"] == {"duplicate": 6}

    piped = memhoncho(deployment, str(zipped), "--dry-run")
    assert piped.returncode == 0 and piped.stderr == ""
    assert "6 duplicate" in piped.stdout  # stored already: the dry run says so too
