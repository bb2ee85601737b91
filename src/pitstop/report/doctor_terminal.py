"""Terminal rendering of a doctor :class:`~pitstop.doctor.analysis.diagnosis.Diagnosis` (rich)."""

from __future__ import annotations

from typing import IO

from rich.table import Table
from rich.text import Text

from pitstop.doctor.analysis.check import Finding
from pitstop.doctor.analysis.diagnosis import Diagnosis, PrecisionSeen, Throughput
from pitstop.doctor.analysis.observations import PHASES, Observations
from pitstop.doctor.analysis.records import FrameworkRecord, MemoryRecord
from pitstop.report.doctor_memory import render_memory
from pitstop.report.doctor_probes import probe_line
from pitstop.report.doctor_ranks import render_ranks
from pitstop.report.terminal import fmt_bytes, fmt_seconds, make_console, text_bar
from pitstop.doctor.analysis.evidence import GpuSummary

__all__ = ["render", "gpu_rows", "impact_label", "framework_line", "shows_framework", "throughput_text", "site_lines",
           "compile_lines", "periodic_lines"]

_SEV_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def impact_label(f: Finding) -> str:
    if f.impact_kind == "correctness":
        return "correctness"
    if f.impact_share is not None:
        unit = "of step" if f.impact_kind == "time" else "of memory"
        return f"{100 * f.impact_share:.1f}% {unit}"
    if f.impact_bytes:
        return fmt_bytes(f.impact_bytes)
    return "n/a"


def throughput_text(tp: Throughput) -> str:
    """``3.2 steps/s, 102.4 samples/s (batch 8 along dim 0, 4 micro-batches per step), 6553 tokens/s``."""
    out = f"{tp.steps_per_s:.2f} steps/s" if tp.steps_per_s else ""
    if tp.samples_per_s:
        extra = f"batch {tp.batch_size}"
        if tp.batch_dim:
            extra += f" along dim {tp.batch_dim}"
        if (tp.micro_batches_per_step or 1) > 1:
            extra += f", {tp.micro_batches_per_step:g} micro-batches per step"
        out += f", {tp.samples_per_s:.1f} samples/s ({extra})"
    if tp.tokens_per_s:
        out += f", {tp.tokens_per_s:.0f} tokens/s"
    return out


def site_lines(obs: Observations) -> list[str]:
    """Where the main thread was during host and other time (sampled stacks), one line each."""
    out = []
    for found, label in ((obs.host_sites, "host (before the forward)"),
                         (obs.other_sites, "other (between the phases)")):
        sites = [s for s in found if s.share >= 0.1][:3]
        if sites:
            out.append(f"{label}: " + ", ".join(f"{s.where}" + (f" via {s.via}" if s.via else "")
                                                + f" ({100 * s.share:.0f}% of samples)" for s in sites))
    return out + periodic_lines(obs)


_PERIODIC = {"eval": "evaluation", "checkpoint": "checkpoint (torch.save)"}


def periodic_lines(obs: Observations) -> list[str]:
    """Work done every N steps (evaluation, checkpoints), amortised over its period: one line each."""
    out = []
    for w in obs.periodic:
        name = _PERIODIC.get(w.kind, w.kind)
        ran = ", ".join(x for x in (f"{w.in_warmup} in the warm-up" if w.in_warmup else "",
                                    f"{w.in_observed} in the observed steps" if w.in_observed else "") if x)
        at = f" at {_short(w.where)}" + (f" via {_short(w.via)}" if w.via else "") if w.where else ""
        head = f"{name}{at}: {fmt_seconds(w.seconds)} a time ({ran or 'ran'})"
        if w.period is None:
            out.append(f"{head}; period unknown (no `x % N == 0` guard found, too few runs to tell)")
        else:
            share = f" = {100 * w.share:.1f}% of training at this step time" if w.share is not None else ""
            out.append(f"{head}; every {w.period} steps ({w.period_how}): {fmt_seconds(w.per_step or 0.0)} per step{share}")
    return out


def _short(where: str | None) -> str:
    if not where:
        return "?"
    path, _, line = where.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def compile_lines(obs: Observations) -> list[str]:
    """The compile section: a summary line, then one line per graph break, recompiled guard
    and recompile-limit hit (empty when nothing was compiled)."""
    c = obs.compile
    if c is None or not c.compiled:
        return []
    graphs = f"{c.graphs} graphs, " if c.graphs is not None else ""
    breaks = "graph breaks unknown" if c.graph_breaks is None else f"{c.graph_breaks} graph breaks"
    head = (f"torch.compile: {graphs}{breaks}, {c.recompile_count} recompiles; {c.compilations} compilations took "
            f"{c.compile_s:.1f} s ({c.compile_s_observed:.1f} s inside the observed steps)")
    out = [head]
    for b in c.breaks[:5]:
        out.append(f"  break at {_short(b.where)}" + (f" in {b.function}" if b.function else "") + f": {b.reason}")
    for r in c.recompiles[:5]:
        out.append(f"  recompiled {r.function} ({_short(r.where)}) {r.count}x: {r.guard}")
    for h in c.limit_hits:
        out.append(f"  {h.function} ({_short(h.where)}) hit {h.limit_name}={h.limit}: runs eagerly after it")
    runs = [f"{what} per observed step {on:.1f}" + (f" ({paired:.1f} with the doctor's hooks against {off:.1f} without, "
                                                    "steps alternating)" if paired is not None and off is not None else "")
            for what, on, paired, off in (
                ("compiled graph runs", c.calls_per_step, c.paired_calls_per_step, c.bare_calls_per_step),
                ("CUDA graph replays", c.replays_per_step, c.paired_replays_per_step, c.bare_replays_per_step))
            if on is not None]
    if runs:
        out.append("  " + "; ".join(runs))
    p = obs.probes.get("compile")
    if p is not None and p.seconds:
        line = (f"  compiled vs eager forward+backward: {1e3 * p.seconds.get('compiled', 0):.2f} ms vs "
                f"{1e3 * p.seconds.get('eager', 0):.2f} ms ({p.speedup:.2f}x)")
        even = p.extra.get("break_even_steps")
        out.append(line + (f"; the compile time pays off after {even:,} steps" if even else
                           "; the compile time is not paid back at this speed"))
    out.append(f"  (from {c.source})")
    return out


def _memory_rows(obs: Observations) -> list[tuple[str, str, str]]:
    m = obs.memory or MemoryRecord()
    rule = "; ".join(f"{o.cls}: {o.state_ratio:.1f}x its parameters, measured from optimizer.state"
                     for o in obs.optimizers if o.state_ratio is not None)
    growth = m.growth_per_step
    return [
        ("parameters", fmt_bytes(m.params), ""),
        ("gradients", fmt_bytes(m.grads), "at the last observed optimizer step"),
        ("optimizer state", fmt_bytes(m.optimizer_state), rule),
        ("activations", fmt_bytes(m.activations), "saved for backward in one step"),
        ("peak", fmt_bytes(m.peak), m.peak_source),
        ("capacity", fmt_bytes(m.capacity), ""),
        ("growth / step", fmt_bytes(growth) if growth is not None else "n/a",
         "slope of memory in use across observed steps (RSS is noisy on CPU)"),
    ]


def framework_line(fw: FrameworkRecord, prec: PrecisionSeen) -> str:
    """``framework: Lightning Trainer (lightning 2.6.6, precision='bf16-mixed')  |  precision: ...``"""
    parts = []
    if fw.name:
        pkg = {"lightning": "lightning", "fabric": "lightning", "transformers": "transformers",
               "accelerate": "accelerate"}.get(fw.name, fw.name)
        ver = (fw.versions or {}).get(pkg)
        conf = ", ".join(f"{k}={v!r}" for k, v in (fw.configured or {}).items())
        inner = ", ".join(x for x in (f"{pkg} {ver}" if ver else "", conf) if x)
        parts.append(f"framework: {fw.label or fw.name}" + (f" ({inner})" if inner else ""))
    ac = prec.autocast
    if ac:
        n = sum((prec.autocast_forwards or {}).values())
        seen = (prec.autocast_forwards or {}).get(ac, 0)
        parts.append(f"precision seen: {'no autocast' if ac == 'none' else ac + ' autocast'} in {seen} of {n} "
                     f"training forwards, {prec.param_dtype} parameters")
    return "  |  ".join(parts)


def shows_framework(fw: FrameworkRecord, prec: PrecisionSeen) -> bool:
    """A framework was detected, or the forwards ran under autocast."""
    return bool(fw.name) or prec.autocast not in (None, "none")


def gpu_rows(g: GpuSummary) -> list[tuple[str, str]]:
    """The GPU section as (measure, value) rows: busy, idle by cause, kernels, top kernels."""
    step = f", {fmt_seconds(g.step_seconds)} per step" if g.step_seconds else ""
    rows = [("profiled", f"{g.steps} steps on {g.device or 'the GPU'}{step}"),
            ("GPU busy", f"{100 * g.busy:.1f}% of the step (kernels, copies, memsets; streams merged)")]
    if g.idle_by_cause is not None:
        i = g.idle_by_cause
        rows.append(("GPU idle", f"{100 * g.idle:.1f}%: input {100 * i.input:.1f}%, after syncs {100 * i.sync:.1f}%, "
                                 f"between launches {100 * i.launch:.1f}%, host code {100 * i.host:.1f}%"))
    if g.kernels_per_step is not None:
        rows.append(("kernels per step", f"{g.kernels_per_step:.0f}"))
    if g.compiled_per_step is not None:
        rows.append(("compiled", f"{g.compiled_per_step:.1f} compiled graph runs, {g.graph_launches_per_step or 0:.1f} "
                                 "CUDA graph launches per step"))
    if g.observed_seconds and g.distortion:
        rows.append(("observed step", f"{fmt_seconds(g.observed_seconds)} (profiled steps {g.distortion:.2f}x it; the "
                                      "findings' shares are of the observed step)"))
    if g.note:
        rows.append(("note", g.note))
    for k in g.top_kernels:
        rows.append(("top kernel", f"{100 * k.share:.1f}% of kernel time, {k.calls} calls: {k.name[:90]}"))
    return rows


def render(diag: Diagnosis, file: IO[str] | None = None) -> None:
    r, o = diag.result, diag.observations
    observed = len(r.observed)
    con = make_console(file)
    style = "bold green" if diag.outcome == "diagnosed" else "bold red"
    con.print(Text(f"pitstop doctor: {diag.headline}", style=style))
    st, tp = o.step_time, diag.throughput
    if st is not None:
        rate = throughput_text(tp)
        con.print(f"device: {o.device_name or o.device}  |  {observed} observed steps "
                  f"after {r.spec.warmup} warmup  |  step time median {fmt_seconds(st.median)}, "
                  f"p90 {fmt_seconds(st.p90)}  |  {rate}")
    fw, prec = diag.framework_seen, diag.precision_seen
    if shows_framework(fw, prec):
        con.print(framework_line(fw, prec), markup=False, highlight=False)
    if r.traceback and diag.world_size <= 1:  # the child already wrote it to the script's stderr, above
        last = r.traceback.rstrip().splitlines()[-1]
        con.print(Text(f"\nThe script's traceback is above (on stderr); it ends: {last}", style="bold"))
    if o.breakdown:
        title = "Step time breakdown (mean per observed step)"
        if diag.world_size > 1:
            ranks = diag.ranks()
            title = (f"Step time breakdown of rank {ranks[0].rank if ranks else 0} (mean per observed "
                     "step; waits for the other ranks are inside backward here, split out in the ranks table below)")
        con.print(Text("\n" + title, style="bold"))
        for phase in PHASES:
            share = o.share(phase)
            con.print(f"  {phase:<10} {text_bar(share, 30)} {100 * share:5.1f}%  {fmt_seconds(o.seconds(phase))}")
        for line in site_lines(o):
            con.print(f"  {line}")
        if tp.batch_how:
            con.print(f"  batch: {tp.batch_how}")
    if diag.world_size > 1:
        render_ranks(diag, con)
    render_memory(diag, con)
    if o.memory is not None and observed:
        table = Table(title="Memory", title_justify="left")
        for col in ("part", "bytes", "note"):
            table.add_column(col, overflow="fold")
        for row in _memory_rows(o):
            table.add_row(*row)
        con.print(table)
        syncs = o.syncs
        con.print(f"syncs per step: {diag.syncs_per_step():.1f}"
                  + ("" if not syncs else "  (" + ", ".join(f"{s.kind} at {s.where}: {s.calls}" for s in syncs[:3]) + ")"))
        fl = o.flops
        if fl is not None and fl.per_step:
            mfu = f"{100 * fl.mfu:.1f}%" if fl.mfu is not None else "n/a"
            con.print(f"FLOPs per step: {fl.per_step / 1e9:.2f} GFLOP; achieved {fl.achieved_per_s / 1e9:.1f} "
                      f"GFLOP/s; MFU {mfu} ({fl.peak_source})")
        for name, p in o.probes.items():
            note = diag.probe_notes.get(name, "")
            con.print(f"probe {name}: {probe_line(p, o.device)}" + (f"; {note}" if note else ""))
    if diag.gpu is not None:
        con.print(Text("\nGPU (profiled steps, analysed as pitstop trace does)", style="bold"))
        for name, value in gpu_rows(diag.gpu):
            con.print(f"  {name:<17} {value}", markup=False, highlight=False)
    for line in compile_lines(diag.observations):
        con.print(line, markup=False, highlight=False)
    if diag.fidelity.changed and diag.gpu is None:  # beside the GPU section when there is one
        con.print(Text("note: " + "; ".join(diag.fidelity.changed), style="bold red"))
    findings = diag.findings
    if findings:
        table = Table(title=f"Findings ({len(findings)}, ranked by impact)", title_justify="left", show_lines=True)
        for col in ("#", "code", "severity", "impact", "finding"):
            table.add_column(col, overflow="fold")
        for i, f in enumerate(findings, 1):
            body = Text(f.title, style="bold")
            body.append(f"\n{f.evidence}\nfix: {f.fix}", style="")
            table.add_row(str(i), f.code, Text(f.severity, style=_SEV_STYLE[f.severity]), impact_label(f), body)
        con.print(table)
    elif diag.outcome == "diagnosed":
        con.print(Text("\nNo findings: no check found a problem worth fixing in this run.", style="green"))
    if diag.skipped:
        con.print(Text("\nChecks skipped", style="bold"))
        for sk in diag.skipped:
            con.print(f"  {sk.code}: {sk.reason}")
    for note in o.notes + diag.errors:
        con.print(f"note: {note}")
    if r.trace_path:
        con.print(f"trace: {r.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)")
