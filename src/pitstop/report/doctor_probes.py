"""One-line text of a doctor probe result (shared by the terminal and HTML reports)."""

from __future__ import annotations

from typing import Any

__all__ = ["speedup_cell", "probe_line"]


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
