"""Terminal helpers on top of rich (tables, colours; plain text when not a TTY)."""

from __future__ import annotations

import math
import sys
from typing import IO

from rich.console import Console

__all__ = ["make_console", "fmt_bytes", "fmt_seconds", "text_bar"]


def make_console(file: IO[str] | None = None, *, stderr: bool = False, width: int | None = None) -> Console:
    """A rich Console; when the stream is not a terminal, output is plain and 100 wide."""
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=width or (None if is_tty else 100), soft_wrap=False,
                   highlight=False, emoji=False)


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_seconds(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "n/a"
    a = abs(s)
    if a >= 1:
        return f"{s:.2f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def text_bar(fraction: float, width: int = 30) -> str:
    """A bar of block characters for a share in [0, 1] (clamped)."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest else ""
    return ("█" * full + partial).ljust(width)
