"""One-line text of a doctor probe result (shared by the terminal and HTML reports)."""

from __future__ import annotations

from typing import Any

__all__ = ["speedup_cell", "probe_line", "gate_note"]


def speedup_cell(p: dict[str, Any]) -> str:
    """``bfloat16 1.72x (90% 1.41x-2.05x, 12 rounds) vs fp32``."""
    best = p.get("candidate")
    s = (p.get("speedups") or {}).get(best)
    if s is None:
        return "n/a"
    conf = f"{100 * p['confidence']:.0f}% " if p.get("confidence") else ""
    return (f"{best} {s['ratio']:.2f}x ({conf}{s['low']:.2f}x-{s['high']:.2f}x, {p.get('runs', '?')} rounds) "
            f"vs {p.get('baseline')}")


def probe_line(p: dict[str, Any]) -> str:
    if "skipped" in p:
        return f"skipped ({p['skipped']})"
    if "error" in p:
        return f"error ({p['error']})"
    return f"{p['what']}: {speedup_cell(p)}"


def gate_note(p: dict[str, Any], threshold: float) -> str:
    """Why a probe that measured a gain produced no finding: the checks gate on the
    interval's lower bound, not on the median ratio. Empty when that does not apply."""
    best = p.get("candidate")
    s = (p.get("speedups") or {}).get(best)
    if s is None or s["ratio"] <= 1.0 or s["low"] >= threshold:
        return ""
    conf = f"{100 * p['confidence']:.0f}% " if p.get("confidence") else ""
    return (f"no finding from this probe: its {conf}interval's lower bound {s['low']:.2f}x is below the "
            f"{threshold:.2f}x a recommendation needs (the median {s['ratio']:.2f}x alone is not enough on this "
            "machine's noise); `pitstop tune` measures it on the real loop")
