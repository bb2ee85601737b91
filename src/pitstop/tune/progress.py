"""A progress bar across the runs of a search: rich on stderr, silent when not a terminal.

Live feedback while the search runs, not a rendering of its result: it draws on the terminal
with ``rich`` itself (``report/`` renders the finished :class:`~pitstop.tune.result.TuneResult`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NullProgress", "BarProgress", "make_progress"]


class NullProgress:
    """Does nothing (no terminal, ``--format json`` piped, tests, API calls by default)."""

    def total(self, n: int) -> None: ...

    def total_add(self, n: int) -> None: ...

    def start(self, label: str) -> None: ...

    def advance(self) -> None: ...

    def __enter__(self) -> NullProgress:
        return self

    def __exit__(self, *exc: Any) -> None: ...


class BarProgress(NullProgress):
    """``rich.progress`` bar: runs done / planned, the configuration being run, elapsed time."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("tune"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.description}"), console=console, transient=True)
        self._task = self._progress.add_task("", total=0)
        self._planned = 0

    def total(self, n: int) -> None:
        self._planned = n
        self._progress.update(self._task, total=n)

    def total_add(self, n: int) -> None:
        self.total(self._planned + n)

    def start(self, label: str) -> None:
        self._progress.update(self._task, description=label)

    def advance(self) -> None:
        self._progress.advance(self._task)

    def __enter__(self) -> BarProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()


def make_progress(enabled: bool | None = None) -> NullProgress:
    """A bar on stderr when ``enabled`` (default: when stderr is a terminal)."""
    import sys

    if enabled is None:
        enabled = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    if not enabled:
        return NullProgress()
    from rich.console import Console

    return BarProgress(Console(file=sys.stderr, soft_wrap=False, highlight=False, emoji=False))
