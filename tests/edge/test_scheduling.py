"""How many test processes ``-n auto`` runs, and the order files go out in (tests/scheduling.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import scheduling

ROOT = Path(__file__).resolve().parents[2]


def _config(*args: str, named: bool = True) -> Any:
    source = pytest.Config.ArgsSource.ARGS if named else pytest.Config.ArgsSource.TESTPATHS
    return SimpleNamespace(args=list(args) or ["tests"], args_source=source)


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.delenv("MEMHONCHO_TEST_REDIS_URL", raising=False)


def test_the_whole_suite_or_a_folder_runs_in_twice_the_cores_at_most_8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduling.os, "cpu_count", lambda: 2)
    assert scheduling.pytest_xdist_auto_num_workers(_config(named=False)) == 4
    assert scheduling.pytest_xdist_auto_num_workers(_config("tests/capture")) == 4
    monkeypatch.setattr(scheduling.os, "cpu_count", lambda: 32)
    assert scheduling.pytest_xdist_auto_num_workers(_config(named=False)) == 8


def test_named_test_files_or_a_named_redis_run_in_one_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    auto = scheduling.pytest_xdist_auto_num_workers
    assert auto(_config("tests/capture/test_ids.py")) == 0
    assert auto(_config("tests/capture/test_ids.py::test_x", "tests/edge/test_readme.py")) == 0
    assert auto(_config("tests/capture/test_ids.py", "tests/edge")) > 0
    monkeypatch.setenv("MEMHONCHO_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
    assert auto(_config(named=False)) == 0
    monkeypatch.delenv("MEMHONCHO_TEST_REDIS_URL")
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert auto(_config(named=False)) == 3


def _item(nodeid: str, slow: bool = False) -> Any:
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: slow or None)


def test_files_go_out_longest_first_recorded_or_guessed_keeping_their_own_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduling, "_recorded", lambda: {"b.py": 100.0, "c.py": 1.0})
    items = [
        _item("a.py::one"),
        _item("c.py::one"),
        _item("b.py::one"),
        _item("d.py::one", slow=True),
        _item("b.py::two"),
    ]
    scheduling.pytest_collection_modifyitems(SimpleNamespace(), items)
    assert [i.nodeid for i in items] == [
        "b.py::one",
        "b.py::two",
        "d.py::one",  # unrecorded: a slow test's guess
        "c.py::one",
        "a.py::one",  # unrecorded: one quick test
    ]
