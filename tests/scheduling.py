"""How the suite runs in parallel (pytest-xdist, ``-n auto --dist loadfile`` in pyproject's
addopts): how many test processes, and which files go out first.

Files go out longest first, so the long poles start at once and the quick files fill the
other processes around them, rather than one starting last and running alone. A file's
length is its seconds in ``tests/durations.json`` (written by ``pytest --record-durations``
after a full run), else a guess from its slow and other tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

#: processes ``-n auto`` starts per core: the tests mostly wait on worker processes, servers
#: and sockets, so twice the cores keeps a 2-core machine busy
WORKERS_PER_CORE = 2
MAX_WORKERS = 8  #: each one starts its own redis-server and PostgreSQL database
DURATIONS = Path(__file__).with_name("durations.json")
GUESS_SLOW_S = 30.0  #: seconds guessed for a slow test of a file not in DURATIONS
GUESS_TEST_S = 0.5  #: and for any other test
_seconds: dict[str, float] = {}  #: this run's seconds by file, for --record-durations


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's seconds in this run to {DURATIONS.name} (run them all)",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many processes ``-n auto`` runs; 0 (this one process) for test files named on the
    command line (a developer's quick loop; under ``--dist loadfile`` one file gets one process
    anyway) or a Redis named by ``MEMHONCHO_TEST_REDIS_URL`` (one database: every process
    would flush the others'). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` names a number instead."""
    if os.environ.get("MEMHONCHO_TEST_REDIS_URL"):
        return 0
    named = [Path(arg.split("::", 1)[0]) for arg in config.args]
    if config.args_source == pytest.Config.ArgsSource.ARGS and not any(p.is_dir() for p in named):
        return 0
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return min(MAX_WORKERS, WORKERS_PER_CORE * (os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first; the order inside a file kept."""
    known = _recorded()
    guess: dict[str, float] = {}
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        name = _file_of(item.nodeid)
        guess[name] = guess.get(name, 0.0) + (GUESS_SLOW_S if slow else GUESS_TEST_S)
    items.sort(key=lambda item: -known.get(_file_of(item.nodeid), guess[_file_of(item.nodeid)]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file_of(report.nodeid)] = _seconds.get(_file_of(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``--record-durations``, in the process that saw every test (not an xdist worker)."""
    if session.config.getoption("record_durations") and not hasattr(session.config, "workerinput"):
        ordered = dict(sorted(_seconds.items(), key=lambda kv: -kv[1]))
        text = json.dumps({name: round(s, 1) for name, s in ordered.items()}, indent=1)
        DURATIONS.write_text(text + "\n")


def _recorded() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]
