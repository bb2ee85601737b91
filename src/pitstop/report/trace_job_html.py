"""The job sections of the ``pitstop trace --html`` page for a many-rank job: every rank in
one sortable table (a click on a column head sorts by it; inline script, no CDN), the
culprits and their victims, and each finding once with its ranks. Renders the typed
:class:`~pitstop.trace.result.TraceReport`; decides nothing."""

from __future__ import annotations

import html

from pitstop.ranks import rank_ranges
from pitstop.report.html import inline_code
from pitstop.trace.result import TraceReport

__all__ = ["job_sections", "SORT_SCRIPT"]

_esc = html.escape

#: sorts a ``table.sortable`` by the clicked column (numbers by their ``data-v``)
SORT_SCRIPT = """<script>
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var dir = th.dataset.dir === 'up' ? -1 : 1; th.dataset.dir = dir === 1 ? 'up' : 'down';
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
      if (x !== undefined && y !== undefined) return dir * (parseFloat(x) - parseFloat(y));
      return dir * a.cells[col].textContent.localeCompare(b.cells[col].textContent);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
</script>"""


def _num(v: float | None, text: str) -> str:
    return f'<td data-v="{-1e30 if v is None else v:.9g}">{_esc(text)}</td>'


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.2f} ms"


def _rank_table(report: TraceReport) -> str:
    why = {o.rank: "; ".join(o.reasons) for o in (report.job.outliers if report.job else ())}
    st = report.straggle
    late = {s.rank: s.late_steps for s in ((st.stragglers + st.one_offs) if st else ())}
    heads = ["rank", "median step", "p90 step", "GPU busy", "idle: input", "idle: host", "communication",
             "late steps", "stands out"]
    rows = []
    for r in report.ranks:
        comm = r.kernels.communication_share if r.kernels else None
        rows.append("<tr>" + _num(r.rank, str(r.rank))
                    + _num(r.step_time.median if r.step_time else None, _ms(r.step_time.median if r.step_time else None))
                    + _num(r.step_time.p90 if r.step_time else None, _ms(r.step_time.p90 if r.step_time else None))
                    + _num(r.gpu.busy if r.gpu else None, _p(r.gpu.busy if r.gpu else None))
                    + _num(r.idle.input if r.idle else None, _p(r.idle.input if r.idle else None))
                    + _num(r.idle.host if r.idle else None, _p(r.idle.host if r.idle else None))
                    + _num(comm, _p(comm)) + _num(late.get(r.rank, 0), str(late.get(r.rank, 0)))
                    + f"<td>{_esc(why.get(r.rank, ''))}</td></tr>")
    head = "".join(f"<th>{_esc(h)}</th>" for h in heads)
    return (f'<p class="muted">click a column head to sort</p><table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{SORT_SCRIPT}")


def _stragglers(report: TraceReport, world: int) -> str:
    st = report.straggle
    if st is None:
        return "<p>no straggler analysis (the files are not one job's distinct ranks)</p>"
    items = []
    for s in st.stragglers + st.one_offs:
        kind = "recurring straggler" if s.recurring else "one-off"
        items.append(f"<li><b>rank {s.rank}</b>: {kind}, late in {s.late_steps}/{s.steps} steps by {_ms(s.lag)} "
                     f"(median); cause <b>{_esc(s.cause)}</b> ({_esc(s.phase)} phase); victims: "
                     f"{_esc(rank_ranges(s.victims, world))}, {s.waited_total:.3g} s waited in all</li>")
    if not items:
        return "<p>no rank made the others wait</p>"
    steps = "".join(f"<tr><td>#{ls.key}</td><td>{ls.culprit}</td><td>{_ms(ls.lag)}</td>"
                    f"<td>{_esc(rank_ranges(ls.late))}</td></tr>" for ls in st.steps)
    return (f"<ul>{''.join(items)}</ul><table><thead><tr><th>step</th><th>culprit (last to arrive)</th>"
            f"<th>the others waited</th><th>late ranks</th></tr></thead><tbody>{steps}</tbody></table>")


def _groups(report: TraceReport) -> str:
    job = report.job
    if job is None or not job.groups:
        return "<p>No findings.</p>"
    rows = []
    for g in job.groups:
        where = "job" if not g.ranks else f"{len(g.ranks)}/{g.world} ranks: {rank_ranges(g.ranks, g.world)}"
        rows.append(f"<tr><td><code>{_esc(g.code)}</code></td><td>{_esc(g.severity)}</td><td>{_esc(where)}</td>"
                    f"<td><b>{_esc(g.title)}</b><br>{inline_code(g.evidence)}<br><i>fix:</i> {inline_code(g.fix)}"
                    "</td></tr>")
    return ("<table><thead><tr><th>code</th><th>severity</th><th>ranks</th><th>finding (lowest rank's numbers)</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def job_sections(report: TraceReport) -> list[tuple[str, str]]:
    """(heading, inner HTML) sections of the job view."""
    world = max([report.job.ranks if report.job else 0] + [r.world_size for r in report.ranks])
    return [("Findings, each once with its ranks", _groups(report)),
            ("Stragglers: culprits and victims", _stragglers(report, world)),
            ("Every rank", _rank_table(report))]
