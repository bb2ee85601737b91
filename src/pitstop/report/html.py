"""Self-contained HTML reports with inline SVG charts: no CDN, no JavaScript, works offline."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Chart", "bar_chart", "stacked_bar", "line_chart", "html_page", "PALETTE", "inline_code"]

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
_esc = html.escape


_BACKTICKS = __import__("re").compile(r"`([^`]+)`")


def inline_code(text: str) -> str:
    """Escape ``text`` for HTML and turn Markdown-style `code` spans into <code> elements
    (the terminal reports keep the backticks; a web page shows them as code)."""
    return _BACKTICKS.sub(lambda m: f"<code>{m.group(1)}</code>", _esc(text))


@dataclass(frozen=True)
class Chart:
    """An SVG chart; ``kind`` and ``points`` are exposed as data attributes for tests."""

    kind: str
    title: str
    svg: str
    points: int

    def to_html(self) -> str:
        return (f'<figure class="chart" data-kind="{_esc(self.kind)}" data-points="{self.points}">'
                f"<figcaption>{_esc(self.title)}</figcaption>{self.svg}</figure>")


def _fmt(v: float) -> str:
    """Plain digits for labels and legends: ``1660`` and ``12.3``, never ``1.66e+03``."""
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1e-3:
        return f"{v:.3g}"
    return f"{v:.1e}"


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], unit: str = "",
              width: int = 640, bar_height: int = 22) -> Chart:
    """Horizontal bars, one per label (negative values are drawn as zero-length)."""
    if len(labels) != len(values):
        raise ValueError("labels and values differ in length")
    top = max([v for v in values if v > 0], default=1.0)
    label_w, pad = 200, 6
    plot_w = width - label_w - 90
    h = pad + len(values) * (bar_height + pad)
    rows = []
    for i, (lab, v) in enumerate(zip(labels, values)):
        y = pad + i * (bar_height + pad)
        w = max(v, 0) / top * plot_w
        rows.append(
            f'<text x="{label_w - 6}" y="{y + bar_height * 0.7:.1f}" text-anchor="end">{_esc(str(lab))}</text>'
            f'<rect class="bar" x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_height}" '
            f'fill="{PALETTE[i % len(PALETTE)]}"><title>{_esc(str(lab))}: {_fmt(v)} {_esc(unit)}</title></rect>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + bar_height * 0.7:.1f}">{_fmt(v)} {_esc(unit)}</text>')
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">{"".join(rows)}</svg>'
    return Chart("bar", title, svg, len(values))


def stacked_bar(title: str, parts: Sequence[tuple[str, float]], unit: str = "", width: int = 640) -> Chart:
    """One bar split into shares, with a legend (e.g. a step-time breakdown)."""
    total = sum(max(v, 0) for _, v in parts) or 1.0
    x, rects, legend = 0.0, [], []
    for i, (lab, v) in enumerate(parts):
        w = max(v, 0) / total * width
        color = PALETTE[i % len(PALETTE)]
        rects.append(f'<rect class="bar" x="{x:.1f}" y="0" width="{w:.1f}" height="28" fill="{color}">'
                     f"<title>{_esc(lab)}: {_fmt(v)} {_esc(unit)} ({v / total:.0%})</title></rect>")
        ly = 46 + i * 18
        legend.append(f'<rect x="0" y="{ly - 11}" width="12" height="12" fill="{color}"/>'
                      f'<text x="18" y="{ly}">{_esc(lab)}: {_fmt(v)} {_esc(unit)} ({max(v, 0) / total:.0%})</text>')
        x += w
    h = 46 + len(parts) * 18
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">{"".join(rects + legend)}</svg>'
    return Chart("stacked", title, svg, len(parts))


def _tick(v: float) -> str:
    """Axis labels in plain digits where they fit (``1930`` rather than ``1.93e+03``)."""
    return _fmt(v)


def line_chart(title: str, ys: Sequence[float], xs: Sequence[float] | None = None, unit: str = "",
               width: int = 640, height: int = 220, x_label: str = "") -> Chart:
    """A polyline with points (e.g. per-step times). The y-axis labels carry ``unit``; the
    left margin grows with them so they are never clipped; ``x_label`` names the x-axis."""
    if not ys:
        return Chart("line", title, '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>', 0)
    xs = list(xs) if xs is not None else list(range(len(ys)))
    lo, hi = min(0.0, min(ys)), max(ys) or 1.0
    suffix = f" {unit}" if unit else ""
    top_label, bottom_label = _tick(hi) + suffix, _tick(lo) + suffix
    # ~7 px per character of 12 px text, plus the gap to the axis
    left, bottom, pad = max(40, 12 + 7 * max(len(top_label), len(bottom_label))), 24, 10
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    def px(x): return left + (x - x0) / (x1 - x0) * (width - left - pad)
    def py(y): return pad + (1 - (y - lo) / ((hi - lo) or 1.0)) * (height - pad - bottom)
    pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
    dots = "".join(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5"><title>{_fmt(x)}: {_tick(y)}{_esc(suffix)}</title></circle>'
                   for x, y in zip(xs, ys))
    xticks = (f'<text x="{px(x0):.1f}" y="{height - 6}" text-anchor="start">{_fmt(x0)}</text>'
              f'<text x="{px(x1):.1f}" y="{height - 6}" text-anchor="end">{_fmt(x1)}</text>') if len(xs) > 1 else ""
    axes = (f'<line x1="{left}" y1="{height - bottom}" x2="{width - pad}" y2="{height - bottom}" stroke="#888"/>'
            f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{height - bottom}" stroke="#888"/>'
            f'<text x="{left - 4}" y="{pad + 8}" text-anchor="end">{_esc(top_label)}</text>'
            f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">{_esc(bottom_label)}</text>'
            f'{xticks}<text x="{(left + width - pad) / 2:.1f}" y="{height - 6}" text-anchor="middle">{_esc(x_label)}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">{axes}'
           f'<polyline fill="none" stroke="{PALETTE[0]}" stroke-width="2" points="{pts}"/>{dots}</svg>')
    return Chart("line", title, svg, len(ys))


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:960px;margin:2em auto;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}
th{background:#f4f4f4}svg text{font-size:12px;fill:#222}figure{margin:1em 0}figcaption{font-weight:600;margin-bottom:.3em}
.muted{color:#777}code,pre{background:#f6f6f6;padding:1px 4px}pre{padding:8px;overflow:auto}
"""


def html_page(title: str, sections: Sequence[tuple[str, str]], subtitle: str = "") -> str:
    """A complete offline page: ``sections`` are (heading, trusted inner HTML) pairs."""
    body = "".join(f"<section><h2>{_esc(h)}</h2>{inner}</section>" for h, inner in sections)
    sub = f'<p class="muted">{_esc(subtitle)}</p>' if subtitle else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>{sub}{body}</body></html>\n")
