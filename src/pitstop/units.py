"""Numbers as findings write them (torch-free): shares, milliseconds, MiB, short source places.

Shared by the doctor's checks and the trace checks, so a finding reads the same in both.
"""

from __future__ import annotations

__all__ = ["pct", "ms", "mib", "short_where"]


def pct(x: float | None) -> str:
    """``0.123`` -> ``"12.3%"``."""
    return "n/a" if x is None else f"{100 * x:.1f}%"


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"


def mib(nbytes: float | None) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 2**20:.1f} MiB"


def short_where(where: str | None, unknown: str = "an unknown line") -> str:
    """``/a/b/model.py:45`` -> ``model.py:45`` (for titles; the evidence keeps the full path)."""
    if not where:
        return unknown
    path, _, line = where.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{line}"
