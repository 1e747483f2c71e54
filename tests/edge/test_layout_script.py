"""scripts/layout.py finds what it is for: too many flat modules, a long file, a circle among
modules or among the stage packages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "layout.py"


def run_layout(root: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, json.loads(done.stdout)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    """The package ``pkg`` under ``tmp_path``, holding ``files`` (path: text); it and each of
    its folders get an empty ``__init__.py``."""
    pkg = tmp_path / "pkg"
    write(pkg / "__init__.py", "")
    for name, text in files.items():
        for folder in Path(name).parents[:-1]:
            write(pkg / folder / "__init__.py", "")
        write(pkg / name, text)
    return pkg


def test_a_tidy_tree_passes(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "low/base.py": "X = 1\n",
            "high.py": "from pkg.low import base\nfrom .low.base import X\n",
        },
    )

    code, report = run_layout(pkg)

    assert code == 0
    assert report["broken"] == []
    assert report["flat_modules"]["count"] == 2
    assert report["long_files"]["files"] == []
    assert report["circles"] == []


def test_a_circle_through_a_function_level_import_and_a_long_file_are_found(
    tmp_path: Path,
) -> None:
    files = {
        "store/base.py": "from pkg.store.forks import Fork\n",
        "store/forks.py": "def summary():\n    from pkg.store import base\n",
        "store/tidy.py": "from . import base\n",  # one way only: no circle
        "bench/long.py": "x = 1\n" * 401,
        "bench/short.py": "x = 1\n" * 400,
    }
    pkg = package(tmp_path, files)

    code, report = run_layout(pkg)

    assert code == 1
    assert report["broken"] == ["long files", "import circles"]
    assert report["long_files"]["files"] == [{"path": "pkg/bench/long.py", "lines": 401}]
    assert [c["modules"] for c in report["circles"]] == [["pkg.store.base", "pkg.store.forks"]]
    edges = {(e["from"], e["to"], e["line"]) for e in report["circles"][0]["edges"]}
    assert edges == {
        ("pkg.store.base", "pkg.store.forks", 1),
        ("pkg.store.forks", "pkg.store.base", 2),
    }


def test_an_eleventh_flat_module_breaks_the_limit(tmp_path: Path) -> None:
    pkg = package(tmp_path, {f"m{i}.py": "" for i in range(10)})

    code, report = run_layout(pkg)

    assert code == 1
    assert report["broken"] == ["flat modules"]
    assert report["flat_modules"]["count"] == 11


def test_the_text_report_names_the_circle_and_the_long_file(tmp_path: Path) -> None:
    pkg = package(
        tmp_path, {"a.py": "import pkg.b\n" + "y = 2\n" * 410, "b.py": "from pkg import a\n"}
    )

    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(pkg)], capture_output=True, text=True
    )

    assert done.returncode == 1
    assert "pkg/a.py 411" in done.stdout
    assert "pkg.a <-> pkg.b" in done.stdout


def test_two_packages_importing_each_other_are_a_package_circle_without_a_module_circle(
    tmp_path: Path,
) -> None:
    files = {
        "store/files.py": "from pkg.status.census import Census\n",
        "status/census.py": "Census = int\n",
        "status/view.py": "from pkg.store import files\n",  # status -> store too
    }
    pkg = package(tmp_path, files)

    code, report = run_layout(pkg)

    assert code == 1
    assert report["circles"] == []  # files -> census, view -> files: no module circle
    assert report["broken"] == ["package circles"]
    (circle,) = report["package_circles"]
    assert circle["packages"] == ["pkg.status", "pkg.store"]
    assert {(e["from"], e["to"]) for e in circle["edges"]} == {
        ("pkg.store.files", "pkg.status.census"),
        ("pkg.status.view", "pkg.store.files"),
    }


def test_a_long_test_or_script_beside_the_package_is_a_long_file(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"low.py": "X = 1\n"})
    write(tmp_path / "tests" / "deep" / "test_long.py", "x = 1\n" * 401)
    write(tmp_path / "tests" / "test_short.py", "x = 1\n" * 400)
    write(tmp_path / "scripts" / "long.py", "x = 1\n" * 402)

    code, report = run_layout(pkg)

    assert code == 1
    assert report["broken"] == ["long files"]
    assert report["long_files"]["files"] == [
        {"path": "scripts/long.py", "lines": 402},
        {"path": "tests/deep/test_long.py", "lines": 401},
    ]
