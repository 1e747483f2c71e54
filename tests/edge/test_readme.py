"""The README stays short and its quick start stays what CI runs.

`.ci/run` runs the README's two quick-start commands (with `"$PYTHON"` for `python3.11`), so a
command that changes in one place and not the other fails here rather than on a newcomer.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
MAX_README_LINES = 250
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def _quick_start_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_the_quick_start_is_two_one_line_commands_the_demo_then_the_tests() -> None:
    demo, tests = _quick_start_commands()
    assert "\n" not in demo and "\n" not in tests
    assert demo.endswith("memhoncho demo")
    assert tests.endswith("-m pytest") and "'.[test]'" in tests


def test_ci_runs_both_quick_start_commands_verbatim() -> None:
    ci_lines = CI_RUN.read_text(encoding="utf-8").splitlines()
    for command in _quick_start_commands():
        assert command.startswith("python3.11 ")
        as_ci_runs_it = command.replace("python3.11", '"$PYTHON"', 1)
        assert as_ci_runs_it in ci_lines, f".ci/run does not run: {command}"


def test_ci_runs_the_demo_from_a_plain_install_before_the_test_extras_touch_the_venv() -> None:
    demo, tests = _quick_start_commands()
    assert "[" not in demo and " -e " not in demo, "the demo installs as a user does"
    text = CI_RUN.read_text(encoding="utf-8")
    plain = text.index("scripts/plain-install")
    first_demo = text.index(demo.replace("python3.11", '"$PYTHON"', 1))
    assert plain < first_demo < text.index(tests.replace("python3.11", '"$PYTHON"', 1))


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository() -> None:
    targets = LINK.findall(README.read_text(encoding="utf-8"))
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert relative, "the README links into docs/"
    missing = [t for t in relative if not (ROOT / t).exists()]
    assert missing == []
