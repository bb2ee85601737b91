"""A job: one trace file or a folder of per-rank traces -> :class:`TraceReport` (torch-free).

Ranks are analysed in parallel processes (each parses its own file), compared with the
shared straggler rule of :mod:`pitstop.ranks`, then every registered trace check (face T)
runs on the typed results.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pitstop.ranks import RankView, StepStats, analyze_stragglers, spread
from pitstop.catalog import implementations
from pitstop.findings import one_claim
from pitstop.severity import settle
from pitstop.trace.analyze import analyze_file
from pitstop.trace.check import JobView
from pitstop.trace.load import TRACE_SUFFIXES, TraceError
from pitstop.findings import Finding
from pitstop.thresholds import Thresholds
from pitstop.trace.result import RankResult, TraceReport
from pitstop.trace.summary import summarize

__all__ = ["trace_files", "analyze_paths", "rank_view", "run_checks", "report_of", "trace"]



def _is_trace_name(p: Path) -> bool:
    return any(p.name.endswith(s) for s in TRACE_SUFFIXES)


def trace_files(paths: list[Path | str]) -> list[Path]:
    """The trace files named: files as given, folders by their ``*.json`` / ``*.json.gz``."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and _is_trace_name(f))
            if not found:
                raise TraceError(f"{p}: no trace files (*.json, *.json.gz) in this folder")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise TraceError(f"{p}: no such file or folder")
    return out


def rank_view(r: RankResult) -> RankView:
    """The rank in :mod:`pitstop.ranks` terms: mean seconds per step by phase, waits per step."""
    st = None
    if r.step_time is not None:
        st = StepStats(median=r.step_time.median, p90=r.step_time.p90, steps=r.steps)
    breakdown: dict[str, float] = {}
    if r.window is not None and r.gpu is not None and r.steps:
        per = r.window.seconds / r.steps
        comm = r.kernels.communication_share if r.kernels else 0.0
        breakdown = {"compute": per * r.gpu.busy * (1 - comm), "communication": per * r.gpu.busy * comm,
                     "idle": per * r.gpu.idle}
        if r.idle is not None:
            breakdown.update({"input": per * r.idle.input, "host": per * r.idle.host,
                              "launch": per * r.idle.launch, "sync": per * r.idle.sync})
    waits = tuple(r.kernels.communication_per_step) if r.kernels else ()
    keys = tuple(r.step_numbers) if len(r.step_numbers) == len(waits) else ()
    return RankView(rank=r.rank, world_size=r.world_size, step_time=st, breakdown=breakdown, device=r.device,
                    source=r.source, waits=waits, wait_keys=keys)


def analyze_paths(paths: list[Path | str], th: Thresholds = Thresholds(),
                  workers: int | None = None) -> tuple[RankResult, ...]:
    """Every trace file of ``paths``, analysed (in parallel processes when there are several)."""
    files = trace_files(paths)
    if len(files) == 1:
        return (analyze_file(files[0], th),)
    n = min(len(files), workers or os.cpu_count() or 1)
    if n <= 1:
        return tuple(analyze_file(f, th) for f in files)
    with ProcessPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(analyze_file, files, [th] * len(files)))
    return tuple(sorted(results, key=lambda r: (r.rank, r.source)))


def run_checks(ranks: tuple[RankResult, ...], job: JobView, th: Thresholds, *,
               settled: bool = True) -> tuple[Finding, ...]:
    """Every registered face-T check over every rank, then over the job; ranked by severity,
    one finding per cost (:func:`pitstop.findings.one_claim`), within the step
    (:func:`pitstop.severity.settle`). ``settled=False``: the checks' findings as they are (the
    doctor merges them with its own first)."""
    found: list[Finding] = []
    same_cost: dict[str, str] = {}
    for cls in implementations("T"):
        check = cls()
        if cls.same_cost_as:
            same_cost[cls.tip] = cls.same_cost_as
        for r in ranks:
            found += list(check.check(r, th))
        found += list(check.check_job(job, th))
    if not settled:
        return tuple(found)
    found, _ = one_claim(found, same_cost)
    # ranked by the one rule (pitstop.severity.settle), a job-wide finding before its ranks' ones
    return tuple(settle(sorted(found, key=lambda f: -1 if f.rank is None else f.rank), th))


def report_of(ranks: tuple[RankResult, ...], th: Thresholds = Thresholds()) -> TraceReport:
    """The job's report: spread, stragglers (only when the files are one job's distinct ranks)
    and every check's findings."""
    views = [rank_view(r) for r in ranks]
    notes = []
    worlds = {r.world_size for r in ranks}
    one_job = True
    if len(ranks) > 1 and len({r.rank for r in ranks}) < len(ranks):
        notes.append("several files carry the same rank: they are compared side by side, not as one job's ranks "
                     "(no straggler analysis)")
        one_job = False
    if len(worlds) > 1:
        notes.append(f"the files name different world sizes ({', '.join(map(str, sorted(worlds)))}): they come from "
                     "different jobs (no straggler analysis)")
        one_job = False
    elif len(ranks) > 1 and worlds != {len(ranks)} and worlds != {1}:
        notes.append(f"distributedInfo says world size {next(iter(worlds))}, {len(ranks)} trace files were given")
    sp = spread(views)
    straggle = (analyze_stragglers(views, min_lag=th.straggler_lag_s, rel_lag=th.straggler_rel_lag)
                if one_job and len(ranks) > 1 else None)
    strag = straggle.stragglers if straggle is not None else ()
    job = JobView(ranks, strag, sp.ratio if sp else None, straggle)
    findings = run_checks(ranks, job, th)
    return TraceReport(ranks=ranks, findings=findings, stragglers=tuple(s.rank for s in strag),
                       step_spread=sp.ratio if sp else None, notes=tuple(notes), straggle=straggle,
                       job=summarize(ranks, findings, straggle) if len(ranks) > 1 else None)


def trace(paths: list[Path | str], th: Thresholds = Thresholds(), workers: int | None = None) -> TraceReport:
    """The whole analysis: files or folders -> :class:`TraceReport`."""
    return report_of(analyze_paths(list(paths), th, workers), th)
