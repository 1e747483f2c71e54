"""Progress of long CLI work (sweep, replay, import, bench) drawn with rich on stderr.

stdout keeps only the result (``--json`` stays parseable); on a terminal the bar is drawn live
and cleared when done, elsewhere (a pipe, a log) nothing is drawn. rich is imported here, and
this module only by the commands that draw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[int, int], None]  # (done, total)
Measure = Callable[[int, "int | None", str], None]  # (bytes done, bytes in all or None, line)


@contextmanager
def bar(description: str) -> Iterator[Advance]:
    """A bar for work of a known size: call the yielded function with (done, total)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as drawn:
        task = drawn.add_task(description, total=None)

        def advance(done: int, total: int) -> None:
            drawn.update(task, completed=done, total=total)

        yield advance


@contextmanager
def byte_bar(description: str) -> Iterator[Measure]:
    """A bar over the bytes of an input read so far: percentage, ETA, and a line of the
    caller's own (counts, rate). It stays on screen when done, as the last counts."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[line]}"),
        console=console,
        disable=not console.is_terminal,
    ) as drawn:
        task = drawn.add_task(description, total=None, line="")

        def measure(done: int, total: int | None, line: str) -> None:
            drawn.update(task, completed=done, total=total, line=line)

        yield measure


@contextmanager
def spinner(description: str) -> Iterator[None]:
    """A spinner with the time elapsed, for work whose size is not known in advance."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        "[progress.description]{task.description}",
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as drawn:
        drawn.add_task(description, total=None)
        yield
