#!/usr/bin/env python3
"""The shape of the package, measured: flat modules, long files, import circles (issue 21).

Circles are counted among modules and among the stage packages (a package that imports another
which imports it back), so the packages read one way, top to bottom.

Run `python scripts/layout.py` (or `--json`); it exits 1 when a limit is broken, so
scripts/check fails on a new flat module, a file past 400 lines (in the package, tests/ or
scripts/) or an import circle.
Every import counts, at module level, inside a function or under TYPE_CHECKING: a circle
hidden in a function is still a circle. An import is an edge to the deepest module it names
(``from a.b import c`` to ``a.b.c`` when that is a module, else to ``a.b``). Circles are the
strongly connected components of those edges. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_FLAT_MODULES = 10  # .py files directly in the package folder, __init__ included
MAX_FILE_LINES = 400  # lines, in any .py file below the package folder or LINE_CHECKED_FOLDERS
#: the repository's other Python, beside the package: its files are held to MAX_FILE_LINES too
LINE_CHECKED_FOLDERS = ("tests", "scripts")

DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "memhoncho"


@dataclass
class Edge:
    """One import of a module by another, where it is written."""

    source: str
    target: str
    line: int


@dataclass
class Report:
    """What the script measured; `broken` names every limit it found broken."""

    root: str
    flat_modules: list[str]
    long_files: list[tuple[str, int]]
    circles: list[list[str]]
    circle_edges: list[list[Edge]] = field(default_factory=list)
    #: circles among the stage packages (a package imports another that imports it back)
    package_circles: list[list[str]] = field(default_factory=list)
    package_circle_edges: list[list[Edge]] = field(default_factory=list)

    @property
    def broken(self) -> list[str]:
        found = []
        if len(self.flat_modules) > MAX_FLAT_MODULES:
            found.append("flat modules")
        if self.long_files:
            found.append("long files")
        if self.circles:
            found.append("import circles")
        if self.package_circles:
            found.append("package circles")
        return found


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the file at `path`, the package being the folder `root`."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def collect_modules(root: Path) -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported_names(tree: ast.AST, name: str, is_package: bool) -> list[tuple[str, str, int]]:
    """Each import anywhere in `tree`: (dotted name, what it is imported from, line).

    `from a.b import c` gives ("a.b.c", "a.b", line): c may be a module or a name in a.b.
    Relative imports are made absolute from `name`.
    """
    found: list[tuple[str, str, int]] = []
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            found.extend((f"{base}.{alias.name}", base, node.lineno) for alias in node.names)
    return found


def deepest_module(dotted: str, modules: dict[str, Path]) -> str:
    """The longest prefix of `dotted` that is one of `modules` ("" when none is)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """The module -> module edges among `modules`, the first line of each kept."""
    edges: dict[tuple[str, str], Edge] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for dotted, base, line in imported_names(tree, name, path.name == "__init__.py"):
            target = dotted if dotted in modules else deepest_module(base, modules)
            if target and target != name and (name, target) not in edges:
                edges[(name, target)] = Edge(name, target, line)
    return list(edges.values())


def circles(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with two or more modules (Tarjan, iterative)."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in edges:
        out[edge.source].append(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(out[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(out[succ])))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def package_of(module: str, root: Path) -> str:
    """The stage package a module belongs to (``pkg.store`` for ``pkg.store.files``); a module
    directly in the root is its own node."""
    parts = module.split(".")
    if len(parts) > 1 and (root / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def package_edges(edges: list[Edge], root: Path) -> list[Edge]:
    """The module edges lifted to packages: the first module edge of each package pair kept."""
    lifted: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        source, target = package_of(edge.source, root), package_of(edge.target, root)
        if target == root.name:
            continue  # the root package: every module imports it first anyway (its version)
        if source != target and (source, target) not in lifted:
            lifted[(source, target)] = Edge(edge.source, edge.target, edge.line)
    return list(lifted.values())


def inside(
    found: list[list[str]], edges: list[Edge], key: Callable[[str], str]
) -> list[list[Edge]]:
    """The edges within each circle (both ends' nodes, by ``key``, in it)."""
    return [
        sorted(
            (e for e in edges if key(e.source) in set(c) and key(e.target) in set(c)),
            key=lambda e: (e.source, e.target),
        )
        for c in found
    ]


def measure(root: Path) -> Report:
    """Measure the package at `root`."""
    modules = collect_modules(root)
    flat = sorted(p.name for p in root.glob("*.py"))
    long_files = []
    beside = [p for f in LINE_CHECKED_FOLDERS for p in sorted((root.parent / f).rglob("*.py"))]
    for path in [*modules.values(), *beside]:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES:
            long_files.append((path.relative_to(root.parent).as_posix(), lines))
    long_files.sort(key=lambda item: -item[1])
    edges = import_edges(modules)
    found = circles(sorted(modules), edges)
    lifted = package_edges(edges, root)
    packages = sorted({package_of(m, root) for m in modules})
    lifted_as_nodes = [
        Edge(package_of(e.source, root), package_of(e.target, root), e.line) for e in lifted
    ]
    found_packages = circles(packages, lifted_as_nodes)
    return Report(
        root.name,
        flat,
        long_files,
        found,
        inside(found, edges, lambda m: m),
        found_packages,
        inside(found_packages, lifted, lambda m: package_of(m, root)),
    )


def as_json(report: Report) -> dict[str, object]:
    return {
        "root": report.root,
        "flat_modules": {
            "count": len(report.flat_modules),
            "limit": MAX_FLAT_MODULES,
            "names": report.flat_modules,
        },
        "long_files": {
            "limit": MAX_FILE_LINES,
            "files": [{"path": p, "lines": n} for p, n in report.long_files],
        },
        "circles": [
            {
                "modules": circle,
                "edges": [{"from": e.source, "to": e.target, "line": e.line} for e in edges],
            }
            for circle, edges in zip(report.circles, report.circle_edges, strict=True)
        ],
        "package_circles": [
            {
                "packages": circle,
                "edges": [{"from": e.source, "to": e.target, "line": e.line} for e in edges],
            }
            for circle, edges in zip(
                report.package_circles, report.package_circle_edges, strict=True
            )
        ],
        "broken": report.broken,
    }


def as_text(report: Report) -> str:
    lines = [
        f"flat modules in {report.root}/: {len(report.flat_modules)} (limit {MAX_FLAT_MODULES})",
        f"files over {MAX_FILE_LINES} lines: {len(report.long_files)}",
        *(f"  {path} {n}" for path, n in report.long_files),
        f"import circles: {len(report.circles)}",
    ]
    for circle, edges in zip(report.circles, report.circle_edges, strict=True):
        lines.append("  " + " <-> ".join(circle))
        lines.extend(f"    {e.source} -> {e.target} (line {e.line})" for e in edges)
    lines.append(f"package circles: {len(report.package_circles)}")
    for circle, edges in zip(report.package_circles, report.package_circle_edges, strict=True):
        lines.append("  " + " <-> ".join(circle))
        lines.extend(f"    {e.source} -> {e.target} (line {e.line})" for e in edges)
    lines.append("broken: " + ", ".join(report.broken) if report.broken else "ok")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the package folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    report = measure(args.root.resolve())
    print(json.dumps(as_json(report), indent=2) if args.json else as_text(report))
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main())
