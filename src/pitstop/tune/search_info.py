"""What a tuning search ran with and what it cost (torch-free), parts of a
:class:`~pitstop.tune.result.TuneResult`: :class:`TuneSettings`, :class:`BudgetUse`,
:class:`ScriptWarnings` and :class:`TimeSplit`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pitstop.tune.schedule.plan import BudgetPlan
from pitstop.tune.run import SetupSplit

if TYPE_CHECKING:
    from pitstop.tune.options import TuneOptions

__all__ = ["TuneSettings", "BudgetUse", "ScriptWarnings", "TimeSplit", "TrialTime", "time_split", "script_warnings"]


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
    """The time budget of the search: ``seconds`` allowed (None: no budget), ``spent``, whether
    it ran out (``exhausted``: some runs were skipped), and the ``plan`` made before measuring
    (what fits, in which order, what will be skipped and why)."""

    seconds: float | None = None
    spent: float = 0.0
    exhausted: bool = False
    plan: BudgetPlan | None = None


@dataclass(frozen=True)
class ScriptWarnings:
    """What the script wrote to stderr over all runs: ``lines`` in all, ``distinct`` lines and
    the ``first`` few distinct ones."""

    lines: int
    distinct: int
    first: list[str]


@dataclass(frozen=True)
class TrialTime:
    """Where the runs of one configuration (``trial``: the baseline, a trick, a path) went, summed:
    ``elapsed`` in all, ``setup`` (start to the first step), ``warmup`` and ``measured`` steps,
    ``other`` (shutdown, reports), and ``split``, the set-up split
    (:class:`pitstop.tune.run.SetupSplit`) summed over the runs that marked it (None: none did)."""

    trial: str
    runs: int
    elapsed: float
    setup: float
    warmup: float
    measured: float
    other: float
    split: SetupSplit | None = None


@dataclass(frozen=True)
class TimeSplit:
    """Where the search's time went, summed over every run: ``setup`` (process start or
    fork, imports, the script's own set-up until its first step), ``warmup`` and
    ``measured`` steps, and ``other`` (the rest of each run: shutdown, reports), plus the
    survey and the search's ``total`` wall time; ``runs`` and how they ran (``worker``);
    ``trials``: the same per configuration, with its set-up split."""

    total: float
    survey: float
    setup: float
    warmup: float
    measured: float
    other: float
    runs: int
    worker: str
    trials: tuple[TrialTime, ...] = ()


def _phases(runs: list[Any]) -> tuple[float, float, float, float]:
    setup = sum(r.setup_s or 0.0 for r in runs)
    warm = sum(r.warmup_s if r.warmup_s is not None else sum(r.warmup_times) for r in runs)
    measured = sum(sum(r.step_times) for r in runs)
    return setup, warm, measured, max(0.0, sum(r.elapsed for r in runs) - setup - warm - measured)


def _split_sum(splits: list[Any]) -> SetupSplit | None:
    if not splits:
        return None

    def total(name: str) -> float | None:
        xs = [getattr(s, name) for s in splits if getattr(s, name) is not None]
        return sum(xs) if xs else None

    return SetupSplit(start=total("start"), imports=total("imports"), build=total("build"),
                      first_step=total("first_step"), compile=total("compile"))


def time_split(run_of: list[tuple[str, Any]], *, total: float, survey: float, worker: str) -> TimeSplit:
    """Where the search's time went, from ``run_of``: each run (:class:`pitstop.tune.run.Run`)
    with the name of the configuration it ran, in the order they ran."""
    runs = [r for _, r in run_of]
    setup, warm, measured, other = _phases(runs)
    trials = []
    for name in dict.fromkeys(n for n, _ in run_of):
        mine = [r for n, r in run_of if n == name]
        s, w, m, o = _phases(mine)
        trials.append(TrialTime(trial=name, runs=len(mine), elapsed=sum(r.elapsed for r in mine), setup=s, warmup=w,
                                measured=m, other=o, split=_split_sum([r.split for r in mine if r.split is not None])))
    return TimeSplit(total=total, survey=survey, setup=setup, warmup=warm, measured=measured, other=other,
                     runs=len(runs), worker=worker, trials=tuple(trials))


def script_warnings(runs: Sequence[Any]) -> ScriptWarnings | None:
    """What the script wrote to stderr over all runs, deduplicated: ``lines`` in all,
    ``distinct`` lines, the ``first`` few distinct ones (None when it wrote nothing)."""
    lines = [ln for r in runs for ln in r.stderr_lines]
    if not lines:
        return None
    distinct = list(dict.fromkeys(ln.strip() for ln in lines if ln.strip()))
    return ScriptWarnings(lines=len(lines), distinct=len(distinct), first=distinct[:3])
