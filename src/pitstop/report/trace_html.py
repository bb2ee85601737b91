"""Self-contained HTML page of a ``pitstop trace`` report (``pitstop trace --html FILE``).

Renders the typed :class:`~pitstop.trace.result.TraceReport`, deciding nothing: the ranks side
by side (one column per rank), where each rank's step went (a stacked bar per rank), the
findings, and each rank's top kernels and operators. Pieces from :mod:`pitstop.report.html`
(inline SVG, no CDN, no JavaScript); a job of many ranks gets the job view of
:mod:`pitstop.report.trace_job_html` (every rank in one sortable table) instead.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from pitstop.report.html import bar_chart, html_page, inline_code, stacked_bar
from pitstop.trace.names import short_name

__all__ = ["render", "rank_rows"]

_esc = html.escape


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _get(r: Any, *path: str) -> Any:
    for name in path:
        r = getattr(r, name, None) if r is not None else None
    return r


#: (label, how to show one rank) for the side-by-side table
_ROWS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("device", lambda r: _esc(r.device or ("no GPU listed" if r.host_only else "unknown"))),
    ("schema", lambda r: _esc(r.schema)),
    ("steps", lambda r: f"{r.steps}" + (f" (#{r.step_numbers[0]}-#{r.step_numbers[-1]})" if r.step_numbers else "")),
    ("median step", lambda r: _ms(_get(r, "step_time", "median"))),
    ("p90 step", lambda r: _ms(_get(r, "step_time", "p90"))),
    ("GPU busy", lambda r: _p(_get(r, "gpu", "busy"))),
    ("GPU idle: input", lambda r: _p(_get(r, "idle", "input"))),
    ("GPU idle: host work", lambda r: _p(_get(r, "idle", "host"))),
    ("GPU idle: launches", lambda r: _p(_get(r, "idle", "launch"))),
    ("GPU idle: syncs", lambda r: _p(_get(r, "idle", "sync"))),
    ("communication (of kernel time)", lambda r: _p(_get(r, "kernels", "communication_share"))),
    ("communication overlapped", lambda r: _p(_get(r, "kernels", "communication_overlap"))),
    ("memcpy + memset (of GPU time)", lambda r: _p(_get(r, "kernels", "memory_share"))),
    ("GEMM/conv in fp32", lambda r: _p(_get(r, "precision", "fp32_share"))),
    ("kernels per step", lambda r: "n/a" if r.launches is None else f"{r.launches.kernels_per_step:.0f}"),
    ("syncs per step", lambda r: f"{r.syncs.per_step:.1f}"),
    ("DataLoader (GPU idle)", lambda r: _p(r.dataloader.share)),
    ("HTA-style idle / compute / non-compute",
     lambda r: "n/a" if r.span is None else f"{_p(r.span.idle)} / {_p(r.span.compute)} / {_p(r.span.non_compute)}"),
)


def rank_rows(ranks: Any) -> list[list[str]]:
    """The side-by-side rows: a label, then one cell per rank."""
    return [[_esc(label)] + [show(r) for r in ranks] for label, show in _ROWS]


def _breakdown(r: Any) -> list[tuple[str, float]]:
    """One rank's window split into busy (compute, communication, copies) and idle causes (ms/step)."""
    if r.gpu is None or r.window is None:
        return []
    per = r.window.seconds / max(r.steps, 1) * 1e3
    k = r.kernels
    comm = k.communication_share if k is not None else 0.0
    mem = k.memory_share if k is not None else 0.0
    busy = r.gpu.busy * per
    parts = [("compute", busy * (1 - mem) * (1 - comm)), ("communication", busy * (1 - mem) * comm),
             ("memcpy/memset", busy * mem)]
    if r.idle is not None:
        parts += [(f"idle: {name}", getattr(r.idle, key) * per)
                  for name, key in (("input", "input"), ("host", "host"), ("launch", "launch"), ("sync", "sync"))]
    else:
        parts.append(("idle", r.gpu.idle * per))
    return [(name, v) for name, v in parts if v > 0]


def _named(items: Any, what: str) -> str:
    rows = [[f"<code>{_esc(short_name(t.name, 90))}</code>", str(t.calls), _ms(t.seconds), _p(t.share)]
            for t in items]
    return _table([what, "calls", "GPU time", "share of kernel time"], rows) if rows else "<p class=\"muted\">none</p>"


def render(report: Any) -> str:
    """The page, as one string."""
    ranks = list(report.ranks)
    if report.job is not None and report.job.compact:
        from pitstop.report.trace_job_html import job_sections

        notes = "".join(f"<p>{inline_code(n)}</p>" for n in report.notes)
        return html_page(f"pitstop trace: {len(ranks)} ranks", job_sections(report) + ([("Notes", notes)] if notes else []),
                         subtitle=f"{len(ranks)} ranks, {len(report.job.groups)} finding(s)")
    sections: list[tuple[str, str]] = []
    heads = ["", *(f"rank {r.rank}/{r.world_size}" for r in ranks)]
    sources = "".join(f'<p class="muted">rank {r.rank}: <code>{_esc(r.source)}</code></p>' for r in ranks)
    sections.append(("Ranks side by side", _table(heads, rank_rows(ranks), "ranks") + sources))
    job = []
    if report.step_spread is not None:
        job.append(f"<p>step-time spread across ranks (slowest / fastest median): {report.step_spread:.2f}x</p>")
    if report.stragglers:
        job.append(f"<p><b>stragglers</b>: rank(s) {', '.join(map(str, report.stragglers))}</p>")
    if len(ranks) > 1 and all(r.step_time is not None for r in ranks):
        job.append(bar_chart("Median step time per rank", [f"rank {r.rank}" for r in ranks],
                             [r.step_time.median * 1e3 for r in ranks], unit="ms").to_html())
    if job:
        sections.append(("The job", "".join(job)))
    charts = []
    for r in ranks:
        parts = _breakdown(r)
        if parts:
            basis = "per step" if r.steps else "over the GPU span"
            charts.append(stacked_bar(f"rank {r.rank}: where the window went ({basis})", parts, unit="ms").to_html())
    if charts:
        sections.append(("Where the step went", "".join(charts)))
    if report.findings:
        rows = [[str(i), f"<code>{_esc(f.code)}</code>", _esc(f.severity), _p(f.impact),
                 "job" if f.rank is None else str(f.rank),
                 f"<b>{_esc(f.title)}</b><br>{inline_code(f.evidence)}<br><i>fix:</i> {inline_code(f.fix)}"]
                for i, f in enumerate(report.findings, 1)]
        body = _table(["#", "code", "severity", "impact", "rank", "finding"], rows, "findings")
    else:
        body = "<p>No findings.</p>"
    sections.append(("Findings, ranked", body))
    for r in ranks:
        inner = ""
        if r.kernels is not None:
            inner += "<h3>Top kernels</h3>" + _named(r.kernels.top, "kernel")
        if r.top_operators:
            inner += "<h3>Top operators (GPU self time)</h3>" + _named(r.top_operators, "operator")
        if r.syncs.sites:
            rows = [[f"<code>{_esc(s.call)}</code>", inline_code(s.cause), str(s.count), _ms(s.seconds)]
                    for s in r.syncs.sites]
            inner += "<h3>Sync calls</h3>" + _table(["call", "cause", "count", "time"], rows)
        if inner:
            sections.append((f"rank {r.rank}: kernels and operators", inner))
    notes = list(report.notes) + [f"rank {r.rank}: {n}" for r in ranks for n in r.notes]
    if notes:
        sections.append(("Notes", "".join(f"<p>{inline_code(n)}</p>" for n in notes)))
    title = "pitstop trace: " + (ranks[0].source if len(ranks) == 1 else f"{len(ranks)} ranks")
    subtitle = f"{len(ranks)} rank(s), {len(report.findings)} finding(s)"
    return html_page(title, sections, subtitle=subtitle)
