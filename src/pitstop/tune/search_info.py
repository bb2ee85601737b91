"""What a tuning search ran with and what it cost (torch-free), parts of a
:class:`~pitstop.tune.result.TuneResult`: :class:`TuneSettings`, :class:`BudgetUse`,
:class:`ScriptWarnings` and :class:`TimeSplit`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pitstop.tune.options import TuneOptions

__all__ = ["TuneSettings", "BudgetUse", "ScriptWarnings", "TimeSplit"]


@dataclass
class TuneSettings:
    """What the search ran with: its :class:`TuneOptions`, ``threads`` (``torch.set_num_threads``
    of each run; None: torch's default) and, in script mode, the ``OMP_WAIT_POLICY`` the runs
    were given (``"PASSIVE"`` or None)."""

    options: TuneOptions
    threads: int | None = None
    omp_wait_policy: str | None = None

    def to_dict(self, mode: str = "api") -> dict[str, Any]:
        extra = {"omp_wait_policy": self.omp_wait_policy} if mode == "script" else {}
        return {**self.options.to_dict(), "threads": self.threads, **extra}


@dataclass(frozen=True)
class BudgetUse:
    """The time budget of the search: ``seconds`` allowed (None: no budget), ``spent``, and
    whether it ran out (``exhausted``: some runs were skipped)."""

    seconds: float | None = None
    spent: float = 0.0
    exhausted: bool = False


@dataclass(frozen=True)
class ScriptWarnings:
    """What the script wrote to stderr over all runs: ``lines`` in all, ``distinct`` lines and
    the ``first`` few distinct ones."""

    lines: int
    distinct: int
    first: list[str]


@dataclass(frozen=True)
class TimeSplit:
    """Where the search's time went, summed over every run: ``setup`` (process start or
    fork, imports, the script's own set-up until its first step), ``warmup`` and
    ``measured`` steps, and ``other`` (the rest of each run: shutdown, reports), plus the
    survey and the search's ``total`` wall time; ``runs`` and how they ran (``worker``)."""

    total: float
    survey: float
    setup: float
    warmup: float
    measured: float
    other: float
    runs: int
    worker: str
