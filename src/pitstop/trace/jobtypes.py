"""The job view of a many-rank ``pitstop trace`` (torch-free records, no import of the rank
results): the spread of step time and GPU busy across ranks, the outlier ranks, and each
finding once with the ranks it holds on. Built by :mod:`pitstop.trace.summary`, held by
``TraceReport.job``, rendered by ``report/trace_terminal.py`` and ``report/trace_html.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Quantiles", "OutlierRank", "FindingGroup", "JobSummary"]


@dataclass(frozen=True)
class Quantiles:
    """One number across the ranks: lowest, 10th percentile, median, 90th percentile, highest,
    and the ranks holding the lowest and the highest."""

    low: float
    p10: float
    median: float
    p90: float
    high: float
    low_rank: int
    high_rank: int


@dataclass(frozen=True)
class OutlierRank:
    """A rank the job view shows: its median step (seconds), GPU busy share, and why it
    stands out (``reasons``: a straggler, a one-off, a step or GPU-busy outlier)."""

    rank: int
    step_median: float | None
    gpu_busy: float | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class FindingGroup:
    """One finding code and title (numbers aside) across the ranks it holds on: the lowest
    rank's title, evidence and fix, the impact range, ``ranks`` empty for a job-wide finding."""

    code: str
    title: str
    severity: str
    ranks: tuple[int, ...]
    world: int
    impact_low: float | None
    impact_high: float | None
    evidence: str
    fix: str


@dataclass(frozen=True)
class JobSummary:
    """The job at a glance. ``compact``: more ranks than one screen holds one rank a page
    (the terminal prints this view instead of every rank). ``outliers``: at most
    ``MAX_OUTLIERS`` ranks, the most deviant first; ``more_outliers`` how many were left out."""

    ranks: int
    compact: bool
    step: Quantiles | None
    busy: Quantiles | None
    outliers: tuple[OutlierRank, ...]
    more_outliers: int
    groups: tuple[FindingGroup, ...]
