"""A saved ``pitstop trace --format json`` report as a side of ``pitstop compare`` (torch-free).

A report keeps each rank's summary, not its steps: the step is its median, phases are the
report's per-step breakdown (compute, communication, idle and the idle causes, from
:func:`pitstop.trace.job.rank_view`), kernels and operators its top lists in seconds per
step. Each is one sample, so the verdict is *changed* without a noise interval; compare the
traces themselves for that. A small report is what a CI job can keep as its baseline.
"""

from __future__ import annotations

import json
from pathlib import Path

from pitstop.compare.model import CompareInputError, Side

__all__ = ["side_from_trace_report"]


_CAUSES = ("input", "host", "launch", "sync")


def _phases(breakdown: dict[str, float]) -> dict[str, float]:
    """The rank's breakdown with GPU idle told by its causes (they add up to it) when known."""
    if not any(c in breakdown for c in _CAUSES):
        return dict(breakdown)
    out = {k: v for k, v in breakdown.items() if k != "idle" and k not in _CAUSES}
    out.update({f"gpu idle: {c}": breakdown[c] for c in _CAUSES if c in breakdown})
    return out


def side_from_trace_report(path: str | Path) -> Side:
    from pitstop.trace.job import rank_view
    from pitstop.trace.result import TraceReport

    p = Path(path)
    try:
        report = TraceReport.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
        raise CompareInputError(f"{p}: cannot read the pitstop trace report: {exc}") from None
    ranks = [r for r in report.ranks if r.step_time is not None and r.steps]
    if not ranks:
        raise CompareInputError(f"{p}: the pitstop trace report has no rank with ProfilerStep#N steps")
    n = len(ranks)

    def mean_of(items: list[dict[str, float]]) -> dict[str, tuple[float, ...]]:
        names = sorted({k for d in items for k in d})
        return {k: (sum(d.get(k, 0.0) for d in items) / n,) for k in names}

    phases = mean_of([_phases(rank_view(r).breakdown) for r in ranks])
    kernels = mean_of([{t.name: t.seconds / r.steps for t in (r.kernels.top if r.kernels else ())} for r in ranks])
    operators = mean_of([{t.name: t.seconds / r.steps for t in r.top_operators} for r in ranks])
    notes = ["a saved pitstop trace report: one value per quantity (the median step, mean phases, the top kernels "
             "and operators), so no noise interval"]
    device = ", ".join(sorted({r.device for r in ranks if r.device})) or "no GPU listed"
    return Side(kind="trace", path=str(p), device=device, steps=(max(r.step_time.median for r in ranks),),
                phases=phases, kernels=kernels, operators=operators, label=p.name,
                ranks=tuple(sorted({r.rank for r in ranks})), notes=tuple(notes))
