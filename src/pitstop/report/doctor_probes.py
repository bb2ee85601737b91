"""One-line text of a doctor probe result (shared by the terminal and HTML reports)."""

from __future__ import annotations

from pitstop.doctor.probe_records import ProbeResult

__all__ = ["speedup_cell", "probe_line"]


def speedup_cell(p: ProbeResult) -> str:
    """``bfloat16 1.72x (90% 1.41x-2.05x, 12 rounds) vs fp32``."""
    g = p.gain()
    if g is None:
        return "n/a"
    conf = f"{100 * g.confidence:.0f}% " if g.confidence else ""
    runs = g.runs if g.runs is not None else "?"
    return f"{g.candidate} {g.ratio:.2f}x ({conf}{g.low:.2f}x-{g.high:.2f}x, {runs} rounds) vs {p.baseline}"


def probe_line(p: ProbeResult) -> str:
    if p.skipped is not None:
        return f"skipped ({p.skipped})"
    if p.error is not None:
        return f"error ({p.error})"
    return f"{p.what}: {speedup_cell(p)}"
