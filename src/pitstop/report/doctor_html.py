"""Self-contained HTML page of a doctor diagnosis (``pitstop doctor --html PATH``).

Charts come from :mod:`pitstop.report.html` (inline SVG, no CDN, no JavaScript): the
step-time breakdown, the memory breakdown and the per-step wall times.
"""

from __future__ import annotations

import html

from pitstop.doctor.analysis.diagnosis import Diagnosis
from pitstop.doctor.analysis.observations import PHASES
from pitstop.report.doctor_memory import fit_lines, oom_lines
from pitstop.report.doctor_probes import speedup_cell, unavailable_text
from pitstop.report.doctor_ranks import rank_rows
from pitstop.report.doctor_terminal import (compile_lines, framework_line, gpu_rows, impact_label, shows_framework,
                                            site_lines, throughput_text)
from pitstop.report.html import bar_chart, html_page, inline_code, line_chart, stacked_bar
from pitstop.report.terminal import fmt_bytes, fmt_seconds

__all__ = ["doctor_html"]

_esc = html.escape
_MEMORY_PARTS = (("parameters", "params"), ("gradients", "grads"), ("optimizer state", "optimizer_state"),
                 ("activations", "activations"), ("peak", "peak"))


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def doctor_html(diag: Diagnosis) -> str:
    r, o = diag.result, diag.observations
    observed_n = len(r.observed)
    sections: list[tuple[str, str]] = []
    st, tp = o.step_time, diag.throughput
    summary = [["outcome", _esc(diag.outcome)], ["target", f"<code>{_esc(r.spec.target)}</code>"],
               ["device", _esc(o.device_name or o.device)],
               ["observed steps", f"{observed_n} (after {r.spec.warmup} warmup)"]]
    fw, prec = diag.framework_seen, diag.precision_seen
    if shows_framework(fw, prec):
        summary.append(["framework / precision", _esc(framework_line(fw, prec))])
    if st is not None:
        summary += [["step time", f"median {fmt_seconds(st.median)}, p90 {fmt_seconds(st.p90)}"],
                    ["throughput", _esc(throughput_text(tp))
                     + (f'<br><span class="muted">batch: {_esc(tp.batch_how)}</span>' if tp.batch_how else "")],
                    ["syncs per step", f"{diag.syncs_per_step():.1f}"]]
    fl = o.flops
    if fl is not None and fl.per_step:
        mfu = f"{100 * fl.mfu:.1f}%" if fl.mfu is not None else "n/a"
        summary.append(["FLOPs", f"{fl.per_step / 1e9:.2f} GFLOP/step, {fl.achieved_per_s / 1e9:.1f} GFLOP/s, "
                                 f"MFU {mfu} ({_esc(fl.peak_source)})"])
    sections.append(("Summary", _table(["measure", "value"], summary)))
    if r.traceback:
        sections.append(("The script failed", f"<pre>{_esc(r.traceback)}</pre>"))
    if r.oom is not None:
        sections.append(("Out of memory", f"<pre>{_esc(chr(10).join(oom_lines(r.oom)))}</pre>"))
    if diag.memory_fit is not None and diag.memory_fit.shown:
        sections.append(("What fits", f"<pre>{_esc(chr(10).join(fit_lines(diag.memory_fit)))}</pre>"))

    if o.breakdown:
        parts = [(ph, o.seconds(ph) * 1e3) for ph in PHASES]
        chart = stacked_bar("Step time breakdown (mean per observed step)", parts, unit="ms")
        sites = "".join(f'<p class="muted">{_esc(t)}</p>' for t in site_lines(o))
        sections.append(("Where the step time goes", chart.to_html() + sites))
    if diag.world_size > 1:
        headers, rows = rank_rows(diag)
        sections.append((f"{diag.world_size} ranks side by side",
                         _table(headers, [[_esc(c) for c in row] for row in rows])))
    records = r.steps
    if records:
        # observed steps only: a warm-up step (compilation, allocator, caches) can take many
        # times longer and would flatten the others against the axis; it is listed below
        observed = [s for s in records if s.kind == "observed"]
        chart = line_chart("Wall time of each observed optimizer step", [s.wall * 1e3 for s in observed],
                           xs=[s.index for s in observed], unit="ms", x_label="step")
        kinds = ", ".join(f"step {s.index} ({s.kind}): {s.wall * 1e3:.0f} ms"
                          for s in records if s.kind != "observed" and s.wall is not None)
        sections.append(("Per-step times", chart.to_html() + (f'<p class="muted">not observed, not plotted: {_esc(kinds)}</p>' if kinds else "")))
    m = o.memory
    if m is not None and observed_n:
        labels = [lab for lab, key in _MEMORY_PARTS if getattr(m, key)]
        values = [getattr(m, key) / 2**20 for lab, key in _MEMORY_PARTS if getattr(m, key)]
        chart = bar_chart("Memory breakdown", labels, values, unit="MiB")
        note = f'<p class="muted">peak: {_esc(m.peak_source)}; capacity {fmt_bytes(m.capacity)}</p>'
        sections.append(("Memory", chart.to_html() + note))

    if diag.gpu is not None:
        sections.append(("GPU (profiled steps, analysed as pitstop trace does)",
                         _table(["measure", "value"], [[_esc(a), _esc(b)] for a, b in gpu_rows(diag.gpu)])))
    if diag.fidelity.changed and diag.gpu is None:  # in the GPU section's note when there is one
        sections.append(("The program measured", "".join(f"<p>{_esc(c)}</p>" for c in diag.fidelity.changed)))
    c = diag.observations.compile
    if c is not None and c.compiled:
        rows = [["graphs", "n/a" if c.graphs is None else str(c.graphs)],
                ["graph breaks", "n/a" if c.graph_breaks is None else str(c.graph_breaks)],
                ["recompiles", str(c.recompile_count)],
                ["compile time", f"{c.compile_s:.1f} s in {c.compilations} compilations, "
                                 f"{c.compile_s_observed:.1f} s inside the observed steps"]]
        details = "".join(f"<p><code>{_esc(line.strip())}</code></p>" for line in compile_lines(diag.observations)[1:])
        sections.append(("torch.compile", _table(["measure", "value"], rows) + details))
    if diag.findings:
        rows = [[str(i), f"<code>{_esc(f.code)}</code>", _esc(f.severity), _esc(impact_label(f)),
                 f"<b>{_esc(f.title)}</b><br>{inline_code(f.evidence)}<br><i>fix:</i> {inline_code(f.fix)}"]
                for i, f in enumerate(diag.findings, 1)]
        body = _table(["#", "code", "severity", "impact", "finding"], rows)
    else:
        body = "<p>No findings.</p>"
    sections.append(("Findings, ranked by impact", body))
    if o.probes:
        rows = []
        for name, p in o.probes.items():
            if p.skipped is not None or p.error is not None:
                rows.append([_esc(name), "skipped" if p.skipped is not None else "error",
                             inline_code(p.skipped or p.error or "")])
            else:
                notes = [x for x in (diag.probe_notes.get(name, ""), unavailable_text(p, o.device),
                                     p.hardware.text() if p.hardware is not None else "") if x]
                rows.append([_esc(name), _esc(speedup_cell(p)) + "".join(f"<br><i>{inline_code(n)}</i>" for n in notes),
                             _esc(p.what or "")])
        sections.append(("Hardware probes (compute only; estimates, pitstop tune measures the real loop)",
                         _table(["probe", "speed-up of the best candidate (interval)", "what was timed"], rows)))
    if o.syncs:
        rows = [[f"<code>{_esc(s.where)}</code>", _esc(s.kind), str(s.calls), str(s.steps_with_calls)]
                for s in o.syncs]
        sections.append(("Host-device syncs (observed steps)", _table(["where", "kind", "calls", "steps"], rows)))
    if diag.skipped:
        rows = [[_esc(sk.code), inline_code(sk.reason)] for sk in diag.skipped]
        sections.append(("Checks skipped", _table(["code", "why"], rows)))
    if o.notes or diag.errors:
        sections.append(("Notes", "".join(f"<p>{inline_code(n)}</p>" for n in o.notes + diag.errors)))
    if r.trace_path:
        sections.append(("Trace", f"<p><code>{_esc(r.trace_path)}</code>: open in Perfetto or chrome://tracing</p>"))
    return html_page(f"pitstop doctor: {r.spec.target}", sections, subtitle=diag.headline)
