"""``pitstop compare`` in the terminal: the step verdict first, then phases, operators, kernels."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pitstop.report.terminal import fmt_seconds
from pitstop.trace.names import short_name

__all__ = ["render", "fmt_change"]

_STYLE = {"slower": "red", "faster": "green"}


def fmt_change(d: Any) -> str:
    """``+12.3% [+8.1, +16.0]`` (B against A, with the interval where there is one)."""
    if d.ratio is None:
        return "n/a"
    text = f"{(d.ratio - 1) * 100:+.1f}%"
    if d.low is not None and d.high is not None and (d.low, d.high) != (d.ratio, d.ratio):
        text += f" [{(d.low - 1) * 100:+.0f}, {(d.high - 1) * 100:+.0f}]"
    return text


def _share(v: float | None) -> str:
    return "" if v is None else f" ({v:.0%})"


def _table(title: str, deltas: Any, with_share: bool) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("name", no_wrap=True, overflow="ellipsis", max_width=56)
    t.add_column("A / step", justify="right", no_wrap=True)
    t.add_column("B / step", justify="right", no_wrap=True)
    t.add_column("change [interval]", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for d in deltas:
        t.add_row(short_name(d.name, 56), fmt_seconds(d.a) + (_share(d.share_a) if with_share else ""),
                  fmt_seconds(d.b) + (_share(d.share_b) if with_share else ""), fmt_change(d),
                  f"[{_STYLE.get(d.verdict, '')}]{d.verdict}[/]" if d.verdict in _STYLE else d.verdict)
    return t


def render(c: Any, console: Console) -> None:
    a, b = c.a, c.b
    console.print(f"[bold]pitstop compare[/]: two {'doctor reports' if c.kind == 'doctor' else 'traces'}")
    for tag, side in (("A", a), ("B", b)):
        extra = f"; rank(s) {', '.join(map(str, side.ranks))}" if side.ranks else ""
        n = len(side.steps)
        console.print(f"  {tag}: {side.path}  ({n} step{'' if n == 1 else 's'} on {side.device or 'unknown device'}{extra})")
        for note in side.notes:
            console.print(f"     [dim]{note}[/]")
    s = c.step
    style = _STYLE.get(s.verdict, "bold")
    console.print(f"\nstep: {fmt_seconds(s.a)} -> {fmt_seconds(s.b)} (median), {fmt_change(s)} "
                  f"-> [{style}]{s.verdict}[/]  [dim]({c.confidence:.0%} interval of the ratio of medians, "
                  f"changes under {c.min_change:.0%} count as none)[/]")
    for note in c.notes:
        console.print(f"[yellow]note:[/] {note}")
    for title, rows, share in (("phases", c.phases, True), ("operators (self time)", c.operators, False),
                               ("kernels", c.kernels, False)):
        if rows:
            console.print()
            console.print(_table(title, rows, share))
    if c.fail_over is not None:
        verdict = "FAILED" if c.failed else "passed"
        console.print(f"\n--fail-over {c.fail_over:g}%: {verdict} (step {fmt_change(s)}, {s.verdict})")
