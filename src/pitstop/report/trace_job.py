"""The job view of a many-rank ``pitstop trace`` in the terminal: one screen whatever the
number of ranks (step time and GPU busy spread, the outlier ranks, the culprits and their
victims, each finding once with the ranks it holds on). Renders the typed
:class:`~pitstop.trace.jobtypes.JobSummary` and :class:`~pitstop.ranks.StraggleAnalysis`;
decides nothing."""

from __future__ import annotations

from pitstop.ranks import rank_ranges
from pitstop.trace.jobtypes import JobSummary, Quantiles
from pitstop.trace.result import TraceReport

__all__ = ["job_lines", "MAX_STEP_LINES"]

#: late steps listed one per line; the rest are counted
MAX_STEP_LINES = 12


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def _spread(name: str, q: Quantiles | None, fmt) -> str:
    if q is None:
        return f"  {name}: n/a"
    return (f"  {name}: median {fmt(q.median)}, p10 {fmt(q.p10)}, p90 {fmt(q.p90)}, "
            f"lowest {fmt(q.low)} (rank {q.low_rank}), highest {fmt(q.high)} (rank {q.high_rank})")


def _straggle_lines(report: TraceReport, world: int) -> list[str]:
    st = report.straggle
    if st is None:
        return []
    out = [f"stragglers (steps matched by {st.matched_by or 'n/a'}: {st.matched}; late = the others waited "
           f"more than {_ms(st.bar)}):"]
    if not st.stragglers and not st.one_offs:
        out.append("  none: no rank made the others wait")
    for s in st.stragglers:
        waits = sorted(s.victim_waits)
        mid = waits[len(waits) // 2] if waits else 0.0
        out.append(f"  rank {s.rank}: RECURRING, late in {s.late_steps}/{s.steps} steps (last to arrive in "
                   f"{s.culprit_steps}), by {_ms(s.lag)}; cause {s.cause} ({s.phase} phase)")
        out.append(f"    victims: {rank_ranges(s.victims, world)} ({len(s.victims)} ranks), {_ms(mid)} each per late "
                   f"step (median), {s.waited_total:.3g} s in all")
    for s in st.one_offs:
        out.append(f"  rank {s.rank}: one-off, late in {s.late_steps}/{s.steps} steps "
                   f"(#{', #'.join(map(str, s.late_keys))}) by {_ms(s.lag)}; cause {s.cause} ({s.phase} phase); "
                   f"{len(s.victims)} ranks waited")
    if st.steps:
        out.append("  per step (culprit = last to arrive):")
        for ls in st.steps[:MAX_STEP_LINES]:
            others = [r for r in ls.late if r != ls.culprit]
            also = f"; also late: {rank_ranges(others)}" if others else ""
            out.append(f"    step #{ls.key}: rank {ls.culprit}, the others waited {_ms(ls.lag)}{also}")
        if len(st.steps) > MAX_STEP_LINES:
            out.append(f"    ... {len(st.steps) - MAX_STEP_LINES} more late steps (--format json holds them all)")
    return out


def job_lines(report: TraceReport, job: JobSummary) -> list[str]:
    """The whole job view, as plain lines."""
    first = report.ranks[0] if report.ranks else None
    world = max(job.ranks, first.world_size if first else 0)
    out = [f"job: {job.ranks} ranks ({first.device if first and first.device else 'unknown GPU'}); "
           f"one page per rank with --html, every number with --format json",
           _spread("median step time across ranks", job.step, _ms),
           _spread("GPU busy across ranks", job.busy, _p)]
    if report.step_spread is not None:
        out.append(f"  step-time spread {report.step_spread:.2f}x (slowest / fastest median)")
    out.append("")
    if job.outliers:
        out.append(f"outlier ranks ({len(job.outliers) + job.more_outliers} of {job.ranks}):")
        out.append(f"  {'rank':>6}  {'median step':>12}  {'GPU busy':>9}  why")
        for o in job.outliers:
            out.append(f"  {o.rank:>6}  {_ms(o.step_median):>12}  {_p(o.gpu_busy):>9}  {'; '.join(o.reasons)}")
        if job.more_outliers:
            out.append(f"  ... {job.more_outliers} more (the HTML page lists every rank)")
    else:
        out.append("outlier ranks: none (every rank within the job's spread)")
    out.append("")
    out += _straggle_lines(report, world)
    out += [f"note: {n}" for n in report.notes]
    out.append("")
    if not job.groups:
        out.append("no findings")
    for g in job.groups:
        where = "job" if not g.ranks else f"on {len(g.ranks)}/{g.world} ranks" + (
            f" ({rank_ranges(g.ranks, g.world)})" if len(g.ranks) < g.world else "")
        lo, hi = g.impact_low, g.impact_high
        impact = "" if lo is None else (f", up to {_p(hi)} of the step" if lo == hi
                                        else f", up to {_p(lo)}-{_p(hi)} of the step")
        out.append(f"{g.code} [{g.severity}{impact}] {where}: {g.title}")
        out.append(f"    evidence{' (lowest rank)' if len(g.ranks) > 1 else ''}: {g.evidence}")
        out.append(f"    fix: {g.fix}")
    return out
