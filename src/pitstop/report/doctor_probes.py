"""One-line text of a doctor probe result (shared by the terminal and HTML reports)."""

from __future__ import annotations

from pitstop.doctor.analysis.probe_records import ProbeResult

__all__ = ["speedup_cell", "probe_line", "unavailable_text"]


def speedup_cell(p: ProbeResult) -> str:
    """``bfloat16 1.72x (90% 1.41x-2.05x, 12 rounds) vs fp32``."""
    g = p.gain()
    if g is None:
        return "n/a"
    conf = f"{100 * g.confidence:.0f}% " if g.confidence else ""
    runs = g.runs if g.runs is not None else "?"
    return f"{g.candidate} {g.ratio:.2f}x ({conf}{g.low:.2f}x-{g.high:.2f}x, {runs} rounds) vs {p.baseline}"


def unavailable_text(p: ProbeResult, device: str = "cpu") -> str:
    """``bfloat16 is not available for this model on this CPU (measured: its first call raised
    RuntimeError: ...)``; empty when every candidate ran."""
    where = "GPU" if device == "cuda" else "CPU"
    return "; ".join(f"{name} is not available for this model on this {where} (measured: its first call raised {why})"
                     for name, why in (p.unavailable or {}).items())


def probe_line(p: ProbeResult, device: str = "cpu") -> str:
    if p.skipped is not None:
        return f"skipped ({p.skipped})"
    if p.error is not None:
        return f"error ({p.error})"
    parts = [f"{p.what}: {speedup_cell(p)}" if p.speedups else (p.what or "")]
    parts += [x for x in (unavailable_text(p, device), p.hardware.text() if p.hardware is not None else "") if x]
    return "; ".join(x for x in parts if x)
