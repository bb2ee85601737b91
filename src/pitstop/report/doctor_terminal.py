"""Terminal rendering of a doctor :class:`~pitstop.doctor.diagnosis.Diagnosis` (rich)."""

from __future__ import annotations

from typing import IO, Any

from rich.table import Table
from rich.text import Text

from pitstop.doctor.observations import Observations
from pitstop.doctor.records import MemoryRecord
from pitstop.report.doctor_probes import probe_line
from pitstop.report.terminal import fmt_bytes, fmt_seconds, make_console, text_bar

__all__ = ["render", "impact_label", "framework_line", "throughput_text", "site_lines"]

_SEV_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def impact_label(f: dict[str, Any]) -> str:
    imp = f["impact"]
    if imp["kind"] == "correctness":
        return "correctness"
    if imp["share"] is not None:
        unit = "of step" if imp["kind"] == "time" else "of memory"
        return f"{100 * imp['share']:.1f}% {unit}"
    if imp["bytes"]:
        return fmt_bytes(imp["bytes"])
    return "n/a"


def throughput_text(tp: dict[str, Any]) -> str:
    """``3.2 steps/s, 102.4 samples/s (batch 8 along dim 0, 4 micro-batches per step), 6553 tokens/s``."""
    out = f"{tp['steps_per_s']:.2f} steps/s" if tp.get("steps_per_s") else ""
    if tp.get("samples_per_s"):
        extra = f"batch {tp['batch_size']}"
        if tp.get("batch_dim"):
            extra += f" along dim {tp['batch_dim']}"
        if (tp.get("micro_batches_per_step") or 1) > 1:
            extra += f", {tp['micro_batches_per_step']:g} micro-batches per step"
        out += f", {tp['samples_per_s']:.1f} samples/s ({extra})"
    if tp.get("tokens_per_s"):
        out += f", {tp['tokens_per_s']:.0f} tokens/s"
    return out


def site_lines(obs: Observations) -> list[str]:
    """Where the main thread was during host and other time (sampled stacks), one line each."""
    out = []
    for found, label in ((obs.host_sites, "host (before the forward)"),
                         (obs.other_sites, "other (between the phases)")):
        sites = [s for s in found if s.share >= 0.1][:3]
        if sites:
            out.append(f"{label}: " + ", ".join(f"{s.where} ({100 * s.share:.0f}% of samples)" for s in sites))
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


def framework_line(fw: dict[str, Any], prec: dict[str, Any]) -> str:
    """``framework: Lightning Trainer (lightning 2.6.6, precision='bf16-mixed')  |  precision: ...``"""
    parts = []
    if fw.get("name"):
        pkg = {"lightning": "lightning", "fabric": "lightning", "transformers": "transformers",
               "accelerate": "accelerate"}.get(fw["name"], fw["name"])
        ver = (fw.get("versions") or {}).get(pkg)
        conf = ", ".join(f"{k}={v!r}" for k, v in (fw.get("configured") or {}).items())
        inner = ", ".join(x for x in (f"{pkg} {ver}" if ver else "", conf) if x)
        parts.append(f"framework: {fw.get('label') or fw['name']}" + (f" ({inner})" if inner else ""))
    ac = prec.get("autocast")
    if ac:
        n = sum((prec.get("autocast_forwards") or {}).values())
        seen = (prec.get("autocast_forwards") or {}).get(ac, 0)
        parts.append(f"precision seen: {'no autocast' if ac == 'none' else ac + ' autocast'} in {seen} of {n} "
                     f"training forwards, {prec.get('param_dtype')} parameters")
    return "  |  ".join(parts)


def render(diag, file: IO[str] | None = None) -> None:
    d = diag.to_dict()
    con = make_console(file)
    style = "bold green" if d["outcome"] == "diagnosed" else "bold red"
    con.print(Text(f"pitstop doctor: {d['message']}", style=style))
    st, tp = d["step_time"] or {}, d["throughput"]
    if st:
        rate = throughput_text(tp)
        con.print(f"device: {d['device']['name'] or d['device']['type']}  |  {d['steps']['observed']} observed steps "
                  f"after {d['steps']['warmup']} warmup  |  step time median {fmt_seconds(st['median'])}, "
                  f"p90 {fmt_seconds(st['p90'])}  |  {rate}")
    fw, prec = d.get("framework") or {}, d.get("precision") or {}
    if fw.get("name") or prec.get("autocast") not in (None, "none"):
        con.print(framework_line(fw, prec), markup=False, highlight=False)
    if d["traceback"]:  # the child already wrote it to the script's stderr, above: not twice
        last = d["traceback"].rstrip().splitlines()[-1]
        con.print(Text(f"\nThe script's traceback is above (on stderr); it ends: {last}", style="bold"))
    if d["breakdown"]:
        con.print(Text("\nStep time breakdown (mean per observed step)", style="bold"))
        for phase, v in d["breakdown"].items():
            con.print(f"  {phase:<10} {text_bar(v['share'], 30)} {100 * v['share']:5.1f}%  {fmt_seconds(v['seconds'])}")
        for line in site_lines(diag.observations):
            con.print(f"  {line}")
        if tp.get("batch_how"):
            con.print(f"  batch: {tp['batch_how']}")
    if d["memory"] and d["steps"]["observed"]:
        table = Table(title="Memory", title_justify="left")
        for col in ("part", "bytes", "note"):
            table.add_column(col, overflow="fold")
        for row in _memory_rows(diag.observations):
            table.add_row(*row)
        con.print(table)
        syncs = d["syncs"]
        con.print(f"syncs per step: {d['syncs_per_step']:.1f}"
                  + ("" if not syncs else "  (" + ", ".join(f"{s['kind']} at {s['where']}: {s['calls']}" for s in syncs[:3]) + ")"))
        fl = d["flops"] or {}
        if fl.get("per_step"):
            mfu = f"{100 * fl['mfu']:.1f}%" if fl.get("mfu") is not None else "n/a"
            con.print(f"FLOPs per step: {fl['per_step'] / 1e9:.2f} GFLOP; achieved {fl['achieved_per_s'] / 1e9:.1f} "
                      f"GFLOP/s; MFU {mfu} ({fl['peak_source']})")
        for name, p in diag.observations.probes.items():
            note = diag.probe_notes.get(name, "")
            con.print(f"probe {name}: {probe_line(p)}" + (f"; {note}" if note else ""))
    findings = d["findings"]
    if findings:
        table = Table(title=f"Findings ({len(findings)}, ranked by impact)", title_justify="left", show_lines=True)
        for col in ("#", "code", "severity", "impact", "finding"):
            table.add_column(col, overflow="fold")
        for i, f in enumerate(findings, 1):
            body = Text(f["title"], style="bold")
            body.append(f"\n{f['evidence']}\nfix: {f['fix']}", style="")
            table.add_row(str(i), f["code"], Text(f["severity"], style=_SEV_STYLE[f["severity"]]),
                          impact_label(f), body)
        con.print(table)
    elif d["outcome"] == "diagnosed":
        con.print(Text("\nNo findings: no check found a problem worth fixing in this run.", style="green"))
    if d["skipped_checks"]:
        con.print(Text("\nChecks skipped", style="bold"))
        for s in d["skipped_checks"]:
            con.print(f"  {s['code']}: {s['reason']}")
    for note in d["notes"] + d["check_errors"]:
        con.print(f"note: {note}")
    if d["trace"]:
        con.print(f"trace: {d['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
