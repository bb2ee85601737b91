"""The doctor's GPU evidence: its profiled window analysed by :mod:`pitstop.trace` (torch-free).

On CUDA the doctor runs a few steps under ``torch.profiler`` (``doctor/record/profiled.py``) and
writes a Kineto trace with ``ProfilerStep#N`` marks. :func:`profiled_window` analyses that
file with the one trace analysis (:func:`pitstop.trace.analyze.analyze_file`) into the
:class:`~pitstop.trace.result.RankResult` the doctor keeps in ``Observations.gpu``;
:func:`gpu_findings` runs the tips' trace checks (face T) on it; :func:`merge` joins them with
the doctor checks' findings, one finding per code (:attr:`pitstop.doctor.analysis.check.Check.gpu_role`
says who decides). A GPU finding's share is of the profiled step; :func:`as_finding` re-bases it
on the observed step with the run's :class:`~pitstop.doctor.analysis.fidelity.Fidelity` (the
profiler's own cost taken out of the GPU idle, ``TraceCheck.impact_basis`` says which findings
are idle time) and lowers it a level when the window is distorted. Tests hand a recorded or
synthetic trace file to :func:`profiled_window`: the seam between a live CUDA run and the CPU
test suite.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from pitstop.doctor.analysis.check import Finding, Thresholds, severity_for
from pitstop.doctor.analysis.fidelity import Fidelity, lowered, step_seconds
from pitstop.trace.result import IdleSplit, NamedTime, RankResult

__all__ = ["profiled_window", "gpu_findings", "merge", "as_finding", "step_seconds", "GPU_PREFIX", "GpuSummary",
           "gpu_summary", "impact_bases"]

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
    #: the observed step's median (the user's step the findings' shares are of), the profiled
    #: step over it, and what the report says beside the section (a distorted or changed window)
    observed_seconds: float | None = None
    distortion: float | None = None
    note: str | None = None
    #: compiled graph runs and CUDA graph replays per profiled step (None: nothing compiled ran)
    compiled_per_step: float | None = None
    graph_launches_per_step: float | None = None


def gpu_summary(rank: RankResult | None, top: int = 5, fid: Fidelity | None = None) -> GpuSummary | None:
    """The GPU section of the profiled window, None when it holds no GPU activity."""
    if rank is None or rank.gpu is None:
        return None
    w = rank.compiled if rank.compiled is not None and rank.compiled.any else None
    return GpuSummary(device=rank.device, steps=rank.steps, step_seconds=step_seconds(rank), busy=rank.gpu.busy,
                      idle=rank.gpu.idle, idle_by_cause=rank.idle,
                      kernels_per_step=rank.launches.kernels_per_step if rank.launches else None,
                      top_kernels=rank.kernels.top[:top] if rank.kernels else (),
                      observed_seconds=fid.observed if fid else None, distortion=fid.distortion if fid else None,
                      note=fid.note() if fid else None, compiled_per_step=w.graphs_per_step if w else None,
                      graph_launches_per_step=w.graph_launches_per_step if w else None)


def profiled_window(path: Path | str) -> tuple[RankResult | None, str | None]:
    """The trace analysis of the doctor's profiled window, or (None, why not)."""
    from pitstop.trace.analyze import analyze_file
    from pitstop.trace.load import TraceError

    try:
        return analyze_file(path), None
    except (TraceError, OSError, ValueError) as exc:
        return None, f"the profiled window's trace could not be analysed: {exc}"


def gpu_findings(rank: RankResult, th: Thresholds | None = None) -> tuple[Finding, ...]:
    """Every registered trace check (face T) on the one rank of the profiled window, as the
    checks found them (shares of the profiled step, most severe first)."""
    from pitstop.trace.check import JobView
    from pitstop.trace.job import run_checks

    found = run_checks((rank,), JobView((rank,), (), None), th or Thresholds(), settled=False)
    return tuple(sorted(found, key=lambda f: f.sort_key()))


def impact_bases() -> dict[str, str]:
    """Tip code -> what its trace check's impact is of (``TraceCheck.impact_basis``)."""
    from pitstop import catalog

    return {cls.tip: cls.impact_basis for cls in catalog.implementations("T")}


def as_finding(t: Finding, rank: RankResult, th: Thresholds, fid: Fidelity | None = None,
               basis: str = "gpu") -> Finding:
    """A trace check's finding in the doctor's terms (one severity ranking: the doctor's): its
    share re-based on the observed step (``fid``; ``basis`` "idle" or "gpu"), a level lower when
    the window is distorted or ran another program."""
    share, secs = t.impact, None
    if share is not None:
        if fid is not None and fid.profiled:
            secs, share = fid.seconds(share, basis), fid.share(share, basis)
        else:
            step = step_seconds(rank)
            secs = share * step if step else None
    evidence = GPU_PREFIX + t.evidence + "."
    if share is not None and t.impact is not None and fid is not None and fid.profiled and fid.observed \
            and abs(share - t.impact) >= 0.005:
        evidence += (f" {100 * t.impact:.1f}% of the profiled step ({1e3 * fid.profiled:.2f} ms) is "
                     f"{100 * share:.1f}% of the observed step ({1e3 * fid.observed:.2f} ms)"
                     + (" with the profiler's extra idle taken out" if basis == "idle" and fid.idle_scale < 1 else "")
                     + ".")
    out = dataclasses.replace(t, evidence=evidence, rank=None, impact_share=share, impact_seconds=secs,
                              severity=severity_for(share, th) if share is not None else t.severity)
    if fid is not None and fid.distorted:
        out = lowered(out, f"the profiled steps ran {fid.distortion:.1f}x slower than the observed ones")
    return out


def _joined(d: Finding, g: Finding, *, gpu_decides: bool) -> Finding:
    evidence = f"{g.evidence} Live run: {d.evidence}"
    if not gpu_decides and d.impact_share is not None:
        return dataclasses.replace(d, evidence=evidence)
    # the doctor's title names the cause it saw; one with no share of its own takes the GPU's
    title = d.title.replace(" (impact: an upper bound)", "") if d.impact_share is not None else g.title
    return dataclasses.replace(d, title=title, evidence=evidence, severity=g.severity, impact_share=g.impact_share,
                               impact_seconds=g.impact_seconds)


def merge(found: list[tuple[str, Finding]], quiet: dict[str, str], gpu: tuple[Finding, ...],
          rank: RankResult, th: Thresholds, fid: Fidelity | None = None) -> tuple[list[Finding], list[tuple[str, str]]]:
    """One finding per code from the doctor checks' ``found`` (``(gpu_role, finding)``) and the
    trace checks' ``gpu`` findings on the profiled window (re-based with ``fid``). ``quiet``:
    code -> gpu_role of the checks that ran and found nothing. Returns the findings and the
    ``(code, reason)`` of the doctor findings the GPU evidence overruled."""
    by_code: dict[str, Finding] = {}
    bases = impact_bases() if fid is not None else {}
    for t in gpu:
        if t.code not in by_code:  # the first: the most severe
            by_code[t.code] = as_finding(t, rank, th, fid, bases.get(t.code, "gpu"))
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
