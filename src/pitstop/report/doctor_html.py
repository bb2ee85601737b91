"""Self-contained HTML page of a doctor diagnosis (``pitstop doctor --html PATH``).

Charts come from :mod:`pitstop.report.html` (inline SVG, no CDN, no JavaScript): the
step-time breakdown, the memory breakdown and the per-step wall times.
"""

from __future__ import annotations

import html

from pitstop.report.doctor_probes import speedup_cell
from pitstop.report.doctor_terminal import framework_line, impact_label, site_lines, throughput_text
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


def doctor_html(diag) -> str:
    d = diag.to_dict()
    sections: list[tuple[str, str]] = []
    st, tp = d["step_time"] or {}, d["throughput"]
    summary = [["outcome", _esc(d["outcome"])], ["target", f"<code>{_esc(d['target'])}</code>"],
               ["device", _esc(d["device"]["name"] or d["device"]["type"])],
               ["observed steps", f"{d['steps']['observed']} (after {d['steps']['warmup']} warmup)"]]
    fw, prec = d.get("framework") or {}, d.get("precision") or {}
    if fw.get("name") or prec.get("autocast") not in (None, "none"):
        summary.append(["framework / precision", _esc(framework_line(fw, prec))])
    if st:
        summary += [["step time", f"median {fmt_seconds(st['median'])}, p90 {fmt_seconds(st['p90'])}"],
                    ["throughput", _esc(throughput_text(tp))
                     + (f'<br><span class="muted">batch: {_esc(tp["batch_how"])}</span>' if tp.get("batch_how") else "")],
                    ["syncs per step", f"{d['syncs_per_step']:.1f}"]]
    fl = d["flops"] or {}
    if fl.get("per_step"):
        mfu = f"{100 * fl['mfu']:.1f}%" if fl.get("mfu") is not None else "n/a"
        summary.append(["FLOPs", f"{fl['per_step'] / 1e9:.2f} GFLOP/step, {fl['achieved_per_s'] / 1e9:.1f} GFLOP/s, "
                                 f"MFU {mfu} ({_esc(fl['peak_source'])})"])
    sections.append(("Summary", _table(["measure", "value"], summary)))
    if d["traceback"]:
        sections.append(("The script failed", f"<pre>{_esc(d['traceback'])}</pre>"))

    if d["breakdown"]:
        parts = [(ph, v["seconds"] * 1e3) for ph, v in d["breakdown"].items()]
        chart = stacked_bar("Step time breakdown (mean per observed step)", parts, unit="ms")
        sites = "".join(f'<p class="muted">{_esc(t)}</p>' for t in site_lines(diag.observations))
        sections.append(("Where the step time goes", chart.to_html() + sites))
    records = d["steps"]["records"]
    if records:
        # observed steps only: a warm-up step (compilation, allocator, caches) can take many
        # times longer and would flatten the others against the axis; it is listed below
        observed = [r for r in records if r["kind"] == "observed"]
        chart = line_chart("Wall time of each observed optimizer step", [r["wall"] * 1e3 for r in observed],
                           xs=[r["index"] for r in observed], unit="ms", x_label="step")
        kinds = ", ".join(f"step {r['index']} ({r['kind']}): {r['wall'] * 1e3:.0f} ms"
                          for r in records if r["kind"] != "observed" and r["wall"] is not None)
        sections.append(("Per-step times", chart.to_html() + (f'<p class="muted">not observed, not plotted: {_esc(kinds)}</p>' if kinds else "")))
    m = d["memory"] or {}
    if m and d["steps"]["observed"]:
        labels = [lab for lab, key in _MEMORY_PARTS if m.get(key)]
        values = [m[key] / 2**20 for lab, key in _MEMORY_PARTS if m.get(key)]
        chart = bar_chart("Memory breakdown", labels, values, unit="MiB")
        note = f'<p class="muted">peak: {_esc(m.get("peak_source", ""))}; capacity {fmt_bytes(m.get("capacity"))}</p>'
        sections.append(("Memory", chart.to_html() + note))

    if d["findings"]:
        rows = [[str(i), f"<code>{_esc(f['code'])}</code>", _esc(f["severity"]), _esc(impact_label(f)),
                 f"<b>{_esc(f['title'])}</b><br>{inline_code(f['evidence'])}<br><i>fix:</i> {inline_code(f['fix'])}"]
                for i, f in enumerate(d["findings"], 1)]
        body = _table(["#", "code", "severity", "impact", "finding"], rows)
    else:
        body = "<p>No findings.</p>"
    sections.append(("Findings, ranked by impact", body))
    if diag.observations.probes:
        rows = []
        for name, p in diag.observations.probes.items():
            if p.skipped is not None or p.error is not None:
                rows.append([_esc(name), "skipped" if p.skipped is not None else "error",
                             inline_code(p.skipped or p.error or "")])
            else:
                note = diag.probe_notes.get(name, "")
                rows.append([_esc(name), _esc(speedup_cell(p)) + (f"<br><i>{inline_code(note)}</i>" if note else ""),
                             _esc(p.what or "")])
        sections.append(("Hardware probes (compute only; estimates, pitstop tune measures the real loop)",
                         _table(["probe", "speed-up of the best candidate (interval)", "what was timed"], rows)))
    if d["syncs"]:
        rows = [[f"<code>{_esc(s['where'])}</code>", _esc(s["kind"]), str(s["calls"]), str(s["steps_with_calls"])]
                for s in d["syncs"]]
        sections.append(("Host-device syncs (observed steps)", _table(["where", "kind", "calls", "steps"], rows)))
    if d["skipped_checks"]:
        rows = [[_esc(s["code"]), inline_code(s["reason"])] for s in d["skipped_checks"]]
        sections.append(("Checks skipped", _table(["code", "why"], rows)))
    if d["notes"] or d["check_errors"]:
        sections.append(("Notes", "".join(f"<p>{inline_code(n)}</p>" for n in d["notes"] + d["check_errors"])))
    if d["trace"]:
        sections.append(("Trace", f"<p><code>{_esc(d['trace'])}</code>: open in Perfetto or chrome://tracing</p>"))
    return html_page(f"pitstop doctor: {d['target']}", sections, subtitle=d["message"])
