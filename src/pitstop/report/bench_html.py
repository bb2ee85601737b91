"""Render a :class:`~pitstop.bench.runner.BenchReport` as one offline HTML page (charts from
:mod:`pitstop.report.html`; the numbers and their text from :mod:`pitstop.report.bench_text`)."""

from __future__ import annotations

import html
from typing import Any

from pitstop.bench.verdict import CONFIRMED, ERROR, NOT_HERE, REFUTED
from pitstop.report.bench_text import busy_note, display_value, fmt_claimed, fmt_rate, fmt_ratio, fmt_spread, fmt_value, machine_line
from pitstop.report.html import bar_chart, html_page

__all__ = ["to_html"]

_esc = html.escape


def _table(rows: list[list[str]], head: list[str]) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _result_html(r: Any) -> str:
    color = {CONFIRMED: "#2e7d32", NOT_HERE: "#b26a00", REFUTED: "#c62828", ERROR: "#c62828"}.get(r.verdict, "#777")
    parts = [
        f'<p class="claim">Seed {_esc(r.claim.seed)} claims: <q>{_esc(r.claim.text)}</q></p>',
        f'<p class="verdict" data-verdict="{_esc(r.verdict)}"><strong style="color:{color}">{_esc(r.verdict)}</strong>'
        f": {_esc(r.reason)}</p>",
    ]
    if r.workload:
        parts.append(f"<p class=\"muted\">Workload: {_esc(r.workload)}</p>")
    if r.ratio is not None and r.claim.ratio_of:
        parts.append(f"<p>Ratio = {_esc(r.claim.ratio_of)}: <strong>{_esc(fmt_ratio(r))}</strong></p>")
    shown = [m for m in r.measurements if not m.info]
    if shown:
        values = [display_value(m) for m in shown]
        units = {u for _, u in values}
        unit = units.pop() if len(units) == 1 else ""
        better = "higher is better" if shown[0].work and shown[0].unit == "s" else "lower is better"
        chart = bar_chart(f"{r.code}: {r.title} ({unit or 'mixed units'}, {better})",
                          [m.name for m in shown], [v for v, _ in values], unit=unit)
        parts.append(chart.to_html())
    if r.measurements:
        parts.append(_table([[m.name + (" (info)" if m.info else ""), fmt_value(m), fmt_spread(m),
                              str(m.summary.n), fmt_rate(m), m.note] for m in r.measurements],
                            ["variant", "median", "IQR/median", "n", "rate", "note"]))
    for c in r.comparisons:
        q = c["ratio"]
        parts.append(f"<p>Also: {_esc(c['label'])}: {q['value']:.2f}x [{q['low']:.2f}-{q['high']:.2f}]</p>")
    for k, v in r.checks.items():
        parts.append(f"<p>Check: {_esc(k)}: <strong>{'yes' if v else 'NO'}</strong></p>")
    for n in r.notes:
        parts.append(f"<p class=\"muted\">{_esc(n)}</p>")
    return "".join(parts)


def to_html(report: Any) -> str:
    d = report.device
    machine = _table([[k, str(v)] for k, v in d.items()] + [["mode", report.mode], ["started", report.started],
                     ["load average (start, end)", f"{report.load_average.get('start')}, {report.load_average.get('end')}"]],
                     ["", ""])
    summary = _table([[r.code, f"{r.claim.seed}: {r.claim.text}", fmt_ratio(r), fmt_claimed(r.claim), r.verdict]
                      for r in report.results], ["code", "seed claims", "measured", "claimed", "verdict"])
    sections = [("Machine", machine), ("Claims", summary)]
    sections += [(f"{r.code} {r.title}", _result_html(r)) for r in report.results]
    subtitle = machine_line(report) + (f". Warning: {busy_note(report)}." if busy_note(report) else "")
    return html_page("pitstop bench", sections, subtitle=subtitle)
