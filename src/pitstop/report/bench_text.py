"""Render a :class:`~pitstop.bench.runner.BenchReport` as text: terminal tables, JSON, Markdown.

Rendering only: numbers come from the runner (:mod:`pitstop.bench`); the offline HTML page is
:mod:`pitstop.report.bench_html`.
"""

from __future__ import annotations

from typing import Any

from pitstop.bench.base import Measurement
from pitstop.bench.verdict import CONFIRMED, ERROR, NOT_HERE, REFUTED
from pitstop.jsoncodec import dumps
from pitstop.report.terminal import fmt_bytes, fmt_seconds

__all__ = ["print_text", "to_json", "to_markdown", "fmt_ratio", "fmt_claimed", "fmt_value", "fmt_spread", "fmt_rate",
           "display_value", "machine_line", "busy_note"]

_STYLE = {CONFIRMED: "green", NOT_HERE: "yellow", REFUTED: "red", ERROR: "bold red"}


def fmt_ratio(result: Any) -> str:
    """``1.78x [1.70-1.85]`` for speed-ups, ``2.00 x param bytes`` for exact claims, ``-`` if none."""
    r = result.ratio
    if r is None:
        return "-"
    if result.claim.kind == "exact":
        m = next((m for m in result.measurements if m.name in result.claim.candidate_names), None)
        unit = f" {m.rate_unit()}" if m is not None and m.rate_unit() else ""
        return f"{r.ratio:.2f}{unit}"
    return f"{r.ratio:.2f}x [{r.low:.2f}-{r.high:.2f}]"


def fmt_claimed(claim: Any) -> str:
    """``3x``, ``faster``, ``2`` (exact); `` (GPU)`` added to a claim made about GPUs."""
    if claim.ratio is None:
        text = "faster" if claim.kind == "speedup" else "-"
    else:
        text = f"{claim.ratio:g}x" if claim.kind == "speedup" else f"{claim.ratio:g}"
    return f"{text} (GPU)" if claim.scope == "gpu" else text


def display_value(m: Measurement) -> tuple[float, str]:
    """The number a chart shows for a measurement: a rate where work is known (higher is
    better for timings), else the median time in ms, or the bytes in MiB."""
    med = m.summary.median
    if m.work:
        rate = m.rate() or 0.0
        if m.unit == "s" and m.work_unit == "FLOP":
            return rate / 1e9, "GFLOP/s"
        return rate, m.rate_unit()
    if m.unit == "s":
        return med * 1e3, "ms"
    if m.unit == "B":
        return med / 2**20, "MiB"
    return med, m.unit


def fmt_value(m: Measurement) -> str:
    s = m.summary
    if m.unit == "s":
        return f"{s.median * 1e6:.2f} us" if s.median < 1e-5 else fmt_seconds(s.median)
    if m.unit == "B":
        return fmt_bytes(s.median)
    return f"{s.median:.4g} {m.unit}"


def fmt_spread(m: Measurement) -> str:
    s = m.summary
    if s.n < 2:
        return "-"
    return f"{s.iqr / s.median:.0%}" if s.median else "-"


def fmt_rate(m: Measurement) -> str:
    if not m.work:
        return ""
    v, unit = display_value(m)
    return f"{v:.3g} {unit}"


def machine_line(report: Any) -> str:
    d = report.device
    gpu = f", GPU {d['gpu']['name']}" if d.get("gpu") else ""
    cap = f"; oneDNN capped at {d['onednn_cap']}" if d.get("onednn_cap") else ""
    return (f"{d['cpu_model']}, {d['cpu_count']} cores, {d['torch_threads']} torch threads, "
            f"torch {d['torch']} ({d['cpu_capability']}{cap}){gpu}; device {d['device']}, {report.mode} mode")


def busy_note(report: Any) -> str | None:
    """A warning when other processes kept the machine busy at the start (timings are noisier)."""
    start = (report.load_average or {}).get("start")
    cores = report.device.get("cpu_count") or 1
    if start and start[0] > 0.5 * cores:
        return (f"the machine was busy: load average {start[0]:.2f} on {cores} cores at the start; timings are "
                f"noisy, re-run on a quiet machine for stable numbers")
    return None


# -- terminal -------------------------------------------------------------------------

def print_text(report: Any, console: Any) -> None:
    from rich.markup import escape as x
    from rich.table import Table

    console.print(f"pitstop bench: {x(machine_line(report))}")
    if busy_note(report):
        console.print(f"[yellow]warning: {x(busy_note(report) or '')}[/yellow]")
    table = Table(title="Claims", title_justify="left")
    for col in ("code", "seed claims", "measured", "claimed", "verdict"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        style = _STYLE.get(r.verdict, "dim")
        table.add_row(r.code, x(f"{r.claim.seed}: {r.claim.text}"), x(fmt_ratio(r)), fmt_claimed(r.claim),
                      f"[{style}]{r.verdict}[/{style}]")
    console.print(table)
    for r in report.results:
        console.print(f"\n[bold]{r.code}[/bold] {x(r.title)}")
        if r.workload:
            console.print(f"  workload: {x(r.workload)}")
        if r.claim.ratio_of and r.ratio is not None:
            console.print(f"  ratio = {x(r.claim.ratio_of)}: {x(fmt_ratio(r))}")
        if r.measurements:
            t = Table(show_edge=False, pad_edge=False, box=None)
            for col in ("variant", "median", "IQR/median", "n", "rate"):
                t.add_column(col)
            for m in r.measurements:
                t.add_row(x("  " + m.name) + (" (info)" if m.info else ""), fmt_value(m), fmt_spread(m),
                          str(m.summary.n), fmt_rate(m))
            console.print(t)
        for c in r.comparisons:
            q = c["ratio"]
            console.print(x(f"  also: {c['label']}: {q['value']:.2f}x [{q['low']:.2f}-{q['high']:.2f}]"))
        for name, ok in r.checks.items():
            console.print(f"  check: {x(name)}: {'yes' if ok else '[red]NO[/red]'}")
        for note in r.notes:
            console.print(f"  note: {x(note)}")
        style = _STYLE.get(r.verdict, "dim")
        console.print(f"  [{style}]{r.verdict}[/{style}]: {x(r.reason)}")
    errors = [r.code for r in report.results if r.error]
    tail = f"; errors in {', '.join(errors)}" if errors else ""
    console.print(f"\n{len(report.results)} benchmark(s) in {report.seconds:.1f} s{tail}")


# -- JSON and Markdown ------------------------------------------------------------------

def to_json(report: Any) -> str:
    return dumps(report.to_dict())


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Any, command: str = "") -> str:
    d = report.device
    lines = [
        f"- Date: {report.started}",
        f"- Machine: {_md(machine_line(report))}",
        f"- CPU flags: {', '.join(d.get('cpu_flags') or []) or 'n/a'}",
        f"- Load average (1/5/15 min) at start {report.load_average.get('start')}, "
        f"at end {report.load_average.get('end')}",
    ]
    if command:
        lines.append(f"- Command: `{command}`")
    if busy_note(report):
        lines.append(f"- Warning: {busy_note(report)}")
    lines += ["", "| code | seed claims | measured | claimed | verdict | why |", "|---|---|---|---|---|---|"]
    for r in report.results:
        lines.append(f"| {r.code} | {_md(r.claim.seed + ': ' + r.claim.text)} | {_md(fmt_ratio(r))} | "
                     f"{fmt_claimed(r.claim)} | **{r.verdict}** | {_md(r.reason)} |")
    lines += ["", "| code | variant | median | IQR/median | n | rate |", "|---|---|---|---|---|---|"]
    for r in report.results:
        for m in r.measurements:
            lines.append(f"| {r.code} | {_md(m.name)}{' (info)' if m.info else ''} | {fmt_value(m)} | "
                         f"{fmt_spread(m)} | {m.summary.n} | {fmt_rate(m)} |")
        for c in r.comparisons:
            q = c["ratio"]
            lines.append(f"| {r.code} | {_md(c['label'])} | {q['value']:.2f}x [{q['low']:.2f}-{q['high']:.2f}] | | | |")
    lines += [""]
    for r in report.results:
        extra = [f"workload: {r.workload}"] if r.workload else []
        extra += [f"check: {k}: {'yes' if v else 'NO'}" for k, v in r.checks.items()] + [f"note: {n}" for n in r.notes]
        if extra:
            lines.append(f"**{r.code}** " + " ".join(_md(e) + "." if not e.endswith(".") else _md(e) for e in extra))
            lines.append("")
    return "\n".join(lines)
