"""Build the job view (:class:`~pitstop.trace.jobtypes.JobSummary`) of a trace job: decides
which ranks are outliers and groups the findings by code (torch-free).

An outlier rank is a straggler or one-off (:mod:`pitstop.ranks`), or a rank whose median step
or GPU busy share lies further from the job's median than ``OUTLIER_MADS`` median absolute
deviations and ``OUTLIER_REL`` of the median (step) / ``OUTLIER_BUSY`` (busy share).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from pitstop.ranks import StraggleAnalysis
from pitstop.trace.jobtypes import FindingGroup, JobSummary, OutlierRank, Quantiles
from pitstop.findings import Finding
from pitstop.trace.result import RankResult

__all__ = ["summarize", "group_findings", "quantiles", "COMPACT_RANKS", "MAX_OUTLIERS", "OUTLIER_MADS",
           "OUTLIER_REL", "OUTLIER_BUSY"]

#: more ranks than this: the terminal shows the job view, not one page per rank
COMPACT_RANKS = 8
#: rows of the outlier table (the HTML page lists every rank)
MAX_OUTLIERS = 16
OUTLIER_MADS = 4.0
OUTLIER_REL = 0.05
OUTLIER_BUSY = 0.05


def quantiles(values: Sequence[tuple[int, float]]) -> Quantiles | None:
    """``(rank, value)`` pairs -> their spread (None when empty)."""
    if not values:
        return None
    xs = sorted(v for _, v in values)

    def q(f: float) -> float:
        return xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]
    lo = min(values, key=lambda rv: rv[1])
    hi = max(values, key=lambda rv: rv[1])
    return Quantiles(low=xs[0], p10=q(0.1), median=statistics.median(xs), p90=q(0.9), high=xs[-1],
                     low_rank=lo[0], high_rank=hi[0])


def _deviants(values: Sequence[tuple[int, float]], rel: float, absolute: float) -> dict[int, float]:
    """Ranks further from the median than the bar, with their signed distance."""
    if len(values) < 3:
        return {}
    med = statistics.median(v for _, v in values)
    mad = statistics.median(abs(v - med) for _, v in values)
    bar = max(OUTLIER_MADS * mad, rel * abs(med), absolute)
    return {r: v - med for r, v in values if abs(v - med) > bar}


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def group_findings(findings: Sequence[Finding], world: int) -> tuple[FindingGroup, ...]:
    """Each finding once: per-rank findings grouped by code and title with the numbers left
    out, naming their ranks; job-wide ones as they are. Order of first appearance."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        key = (f.code, _NUMBER.sub("#", f.title)) if f.rank is not None else (f.code, f.title, id(f))
        groups.setdefault(key, []).append(f)
    out = []
    for items in groups.values():
        first = min(items, key=lambda f: -1 if f.rank is None else f.rank)
        impacts = [f.impact for f in items if f.impact is not None]
        out.append(FindingGroup(
            code=first.code, title=first.title, severity=first.severity,
            ranks=tuple(sorted({f.rank for f in items if f.rank is not None})), world=world,
            impact_low=min(impacts) if impacts else None, impact_high=max(impacts) if impacts else None,
            evidence=first.evidence, fix=first.fix))
    return tuple(out)


def summarize(ranks: Sequence[RankResult], findings: Sequence[Finding],
              straggle: StraggleAnalysis | None) -> JobSummary:
    """The job view of ``ranks`` (one job's distinct ranks, or files compared side by side)."""
    steps = [(r.rank, r.step_time.median) for r in ranks if r.step_time is not None]
    busy = [(r.rank, r.gpu.busy) for r in ranks if r.gpu is not None]
    reasons: dict[int, list[str]] = {}
    score: dict[int, float] = {}
    if straggle is not None:
        for s in straggle.stragglers:
            reasons.setdefault(s.rank, []).append(f"straggler ({s.cause}: {s.phase})")
            score[s.rank] = score.get(s.rank, 0.0) + 1e6 + s.lag
        for s in straggle.one_offs:
            reasons.setdefault(s.rank, []).append(f"late in {s.late_steps} of {s.steps} steps ({s.cause})")
            score[s.rank] = score.get(s.rank, 0.0) + 1e3 + s.lag
    med_step = statistics.median(v for _, v in steps) if steps else 0.0
    for r, d in _deviants(steps, OUTLIER_REL, 0.0).items():
        reasons.setdefault(r, []).append(f"step {'+' if d > 0 else ''}{100 * d / med_step:.0f}% vs median"
                                         if med_step else "step time")
        score[r] = score.get(r, 0.0) + abs(d) / (med_step or 1.0)
    for r, d in _deviants(busy, 0.0, OUTLIER_BUSY).items():
        reasons.setdefault(r, []).append(f"GPU busy {'+' if d > 0 else ''}{100 * d:.0f} points vs median")
        score[r] = score.get(r, 0.0) + abs(d)
    by_rank = {r.rank: r for r in ranks}
    order = sorted(reasons, key=lambda r: (-score.get(r, 0.0), r))
    rows = []
    for r in order[:MAX_OUTLIERS]:
        rr = by_rank.get(r)
        rows.append(OutlierRank(rank=r, step_median=rr.step_time.median if rr and rr.step_time else None,
                                gpu_busy=rr.gpu.busy if rr and rr.gpu else None, reasons=tuple(reasons[r])))
    world = max((r.world_size for r in ranks), default=len(ranks))
    return JobSummary(ranks=len(ranks), compact=len(ranks) > COMPACT_RANKS, step=quantiles(steps),
                      busy=quantiles(busy), outliers=tuple(sorted(rows, key=lambda o: o.rank)),
                      more_outliers=max(0, len(order) - MAX_OUTLIERS),
                      groups=group_findings(findings, max(world, len(ranks))))
