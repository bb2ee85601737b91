"""The doctor's GPU evidence: its profiled window analysed by :mod:`pitstop.trace` (torch-free).

On CUDA the doctor runs a few steps under ``torch.profiler`` (``doctor/record/profiled.py``) and
writes a Kineto trace with ``ProfilerStep#N`` marks. :func:`profiled_window` analyses that
file with the one trace analysis (:func:`pitstop.trace.analyze.analyze_file`) into the
:class:`~pitstop.trace.result.RankResult` the doctor keeps in ``Observations.gpu``;
:func:`gpu_findings` runs the tips' trace checks (face T) on it; :func:`merge` joins them with
the doctor checks' findings, one finding per code (:attr:`pitstop.doctor.analysis.check.Check.gpu_role`
says who decides). Tests hand a recorded or synthetic trace file to :func:`profiled_window`:
the seam between a live CUDA run and the CPU test suite.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from pitstop.doctor.analysis.check import Finding, Thresholds, severity_for
from pitstop.trace.result import IdleSplit, NamedTime, RankResult

__all__ = ["profiled_window", "gpu_findings", "merge", "as_finding", "step_seconds", "GPU_PREFIX", "GpuSummary",
           "gpu_summary"]

#: how the GPU evidence of a merged finding starts
GPU_PREFIX = "GPU (profiled steps): "


@dataclass(frozen=True)
class GpuSummary:
    """The report's GPU section (``gpu`` of the doctor's JSON): the profiled steps on ``device``,
    GPU ``busy`` share of the step (all streams merged), ``idle_by_cause`` (shares of the step:
    input, host, launch, sync), kernels per step and the top kernels by GPU time."""

    device: str
    steps: int
    step_seconds: float | None
    busy: float
    idle: float
    idle_by_cause: IdleSplit | None
    kernels_per_step: float | None
    top_kernels: tuple[NamedTime, ...]


def gpu_summary(rank: RankResult | None, top: int = 5) -> GpuSummary | None:
    """The GPU section of the profiled window, None when it holds no GPU activity."""
    if rank is None or rank.gpu is None:
        return None
    return GpuSummary(device=rank.device, steps=rank.steps, step_seconds=step_seconds(rank), busy=rank.gpu.busy,
                      idle=rank.gpu.idle, idle_by_cause=rank.idle,
                      kernels_per_step=rank.launches.kernels_per_step if rank.launches else None,
                      top_kernels=rank.kernels.top[:top] if rank.kernels else ())


def profiled_window(path: Path | str) -> tuple[RankResult | None, str | None]:
    """The trace analysis of the doctor's profiled window, or (None, why not)."""
    from pitstop.trace.analyze import analyze_file
    from pitstop.trace.load import TraceError

    try:
        return analyze_file(path), None
    except (TraceError, OSError, ValueError) as exc:
        return None, f"the profiled window's trace could not be analysed: {exc}"


def gpu_findings(rank: RankResult, th: Thresholds | None = None) -> tuple[Finding, ...]:
    """Every registered trace check (face T) on the one rank of the profiled window."""
    from pitstop.trace.check import JobView
    from pitstop.trace.job import run_checks

    return run_checks((rank,), JobView((rank,), (), None), th or Thresholds())


def step_seconds(rank: RankResult) -> float | None:
    """Seconds per profiled step (the window over its steps), None without steps."""
    return rank.window.seconds / rank.steps if rank.window is not None and rank.steps else None


def as_finding(t: Finding, rank: RankResult, th: Thresholds) -> Finding:
    """A trace check's finding in the doctor's terms (one severity ranking: the doctor's)."""
    step = step_seconds(rank)
    return dataclasses.replace(t, evidence=GPU_PREFIX + t.evidence + ".", rank=None,
                               severity=severity_for(t.impact, th) if t.impact is not None else t.severity,
                               impact_seconds=t.impact * step if t.impact is not None and step else None)


def _joined(d: Finding, g: Finding, *, gpu_decides: bool) -> Finding:
    evidence = f"{g.evidence} Live run: {d.evidence}"
    if not gpu_decides and d.impact_share is not None:
        return dataclasses.replace(d, evidence=evidence)
    # the doctor's title names the cause it saw; one with no share of its own takes the GPU's
    title = d.title.replace(" (impact: an upper bound)", "") if d.impact_share is not None else g.title
    return dataclasses.replace(d, title=title, evidence=evidence, severity=g.severity, impact_share=g.impact_share,
                               impact_seconds=g.impact_seconds)


def merge(found: list[tuple[str, Finding]], quiet: dict[str, str], gpu: tuple[Finding, ...],
          rank: RankResult, th: Thresholds) -> tuple[list[Finding], list[tuple[str, str]]]:
    """One finding per code from the doctor checks' ``found`` (``(gpu_role, finding)``) and the
    trace checks' ``gpu`` findings on the profiled window. ``quiet``: code -> gpu_role of the
    checks that ran and found nothing. Returns the findings and the ``(code, reason)`` of the
    doctor findings the GPU evidence overruled."""
    by_code: dict[str, Finding] = {}
    for t in gpu:
        by_code.setdefault(t.code, as_finding(t, rank, th))  # the first: the most severe
    out: list[Finding] = []
    dropped: list[tuple[str, str]] = []
    used: set[str] = set()
    for role, d in found:
        g = by_code.get(d.code)
        if g is None:
            if role == "trace":
                dropped.append((d.code, f"the profiled GPU steps show no such cost (GPU busy "
                                        f"{rank.gpu.busy * 100:.1f}%), so the live timers' finding "
                                        f"\"{d.title}\" is not reported" if rank.gpu else "no GPU activity profiled"))
                continue
            out.append(d)
        elif d.code in used:
            if role == "trace":  # the code's GPU cost is already in its one finding
                dropped.append((d.code, f"\"{d.title}\": the GPU cost of {d.code} is reported once"))
                continue
            out.append(d)
        else:
            used.add(d.code)
            out.append(_joined(d, g, gpu_decides=role != "live"))
    for code, g in by_code.items():
        if code not in used and quiet.get(code) != "live":
            out.append(g)
    return out, dropped
