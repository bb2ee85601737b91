"""``pitstop trace`` in the terminal: per rank, where the step went; then the findings.
Renders the typed :class:`~pitstop.trace.result.TraceReport`; decides nothing."""

from __future__ import annotations

from typing import IO

from pitstop.report.terminal import make_console
from pitstop.trace.names import short_name
from pitstop.trace.result import RankResult, TraceReport

__all__ = ["print_trace", "rank_lines"]


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def rank_lines(r: RankResult) -> list[str]:
    """The plain lines describing one rank."""
    head = f"rank {r.rank}/{r.world_size}  {r.device or 'unknown GPU'}  ({r.schema} schema)  {r.source}"
    out = [head]
    if r.step_time is not None:
        nums = f"#{r.step_numbers[0]}-#{r.step_numbers[-1]}" if r.step_numbers else ""
        out.append(f"  steps {r.steps} ({nums}): median {_ms(r.step_time.median)}, p90 {_ms(r.step_time.p90)}")
    elif r.window is not None:
        out.append(f"  no profiler steps: shares over the GPU span of {_ms(r.window.seconds)}")
    if r.gpu is not None:
        launched = f", {_p(r.gpu.busy_launched)} over the work the steps launched" if r.gpu.busy_launched is not None else ""
        out.append(f"  GPU busy {_p(r.gpu.busy)} / idle {_p(r.gpu.idle)} (streams merged{launched})")
    if r.idle is not None:
        i = r.idle
        out.append(f"  idle because of: input {_p(i.input)}, host work {_p(i.host)}, launches {_p(i.launch)}, "
                   f"syncs {_p(i.sync)}")
    if r.kernels is not None:
        k = r.kernels
        comm = f", overlapped with compute {_p(k.communication_overlap)}" if k.communication_overlap is not None else ""
        out.append(f"  kernel time: compute {_p(k.compute_share)}, communication {_p(k.communication_share)}{comm}; "
                   f"memcpy+memset {_p(k.memory_share)} of GPU time")
    if r.precision is not None and r.precision.by_precision:
        mix = ", ".join(f"{k} {_p(v)}" for k, v in sorted(r.precision.by_precision.items(), key=lambda kv: -kv[1]))
        out.append(f"  GEMM/conv {_p(r.precision.matmul_share)} of kernel time: {mix}")
    if r.launches is not None:
        la = r.launches
        out.append(f"  {la.kernels_per_step:.0f} kernels/step, median {la.median_kernel_us:.1f} us, "
                   f"{_p(la.short_kernels)} shorter than {la.short_threshold_us:.0f} us")
    s = r.syncs
    out.append(f"  syncs: {s.per_step:.1f} per step" + (f" ({s.count} in the trace)" if not r.steps else ""))
    for site in s.sites[:3]:
        out.append(f"    {site.count} x {site.call} <- {site.cause}")
    if r.copies is not None and (r.copies.htod or r.copies.dtoh):
        c = r.copies
        out.append(f"  copies: {c.htod} HtoD, {c.dtoh} DtoH; {c.pageable} pageable, {c.pinned} pinned; "
                   f"{_p(c.copy_share)} of the step")
    if r.dataloader.host_share is not None:
        out.append(f"  DataLoader: {_p(r.dataloader.share)} of the step with the GPU idle "
                   f"(the host was in it {_p(r.dataloader.host_share)} of the step)")
    if r.kernels is not None and r.kernels.top:
        out.append("  top kernels:")
        out += [f"    {_p(t.share):>6} {t.calls:>6}x  {short_name(t.name, 70)}" for t in r.kernels.top[:5]]
    if r.top_operators:
        out.append("  top operators (GPU time launched):")
        out += [f"    {_p(t.share):>6} {t.calls:>6}x  {t.name}" for t in r.top_operators[:5]]
    out += [f"  note: {n}" for n in r.notes]
    return out


def print_trace(report: TraceReport, file: IO[str] | None = None) -> None:
    console = make_console(file)
    if report.job is not None and report.job.compact:
        from pitstop.report.trace_job import job_lines

        for line in job_lines(report, report.job):
            console.print(line, markup=False)
        return
    for r in report.ranks:
        for line in rank_lines(r):
            console.print(line, markup=False)
        console.print("")
    if len(report.ranks) > 1:
        spread = f"step-time spread {report.step_spread:.2f}x (slowest / fastest median)" if report.step_spread else ""
        strag = f"stragglers: rank {', '.join(map(str, report.stragglers))}" if report.stragglers else "no straggler"
        console.print(f"{len(report.ranks)} ranks: {spread}{'; ' if spread else ''}{strag}", markup=False)
    for n in report.notes:
        console.print(f"note: {n}", markup=False)
    if not report.findings:
        console.print("no findings", markup=False)
    for f in report.findings:
        where = f"rank {f.rank}" if f.rank is not None else "job"
        impact = f", up to {_p(f.impact)} of the step" if f.impact is not None else ""
        console.print(f"{f.code} [{f.severity}{impact}] {where}: {f.title}", markup=False)
        console.print(f"    evidence: {f.evidence}", markup=False)
        console.print(f"    fix: {f.fix}", markup=False)
