"""The reference answers of ``../shared/traces/README.md``, read from its tables at test time."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT

TRACES = ROOT.parent / "shared" / "traces"
README = TRACES / "README.md"
SKIP = f"shared traces not found at {TRACES}"


def _table(heading_start: str) -> list[list[str]]:
    """The rows (cells) of the first table after the line starting with ``heading_start``."""
    lines = README.read_text(encoding="utf-8").splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(heading_start))
    rows, started = [], False
    for line in lines[i + 1:]:
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif started:
            break
    return rows[1:]  # drop the header


def measured_rows() -> list[list[str]]:
    return _table("Definitions used in this table")


def hta_rows() -> list[list[str]]:
    return _table("HTA 0.5.0 `get_temporal_breakdown`")


def pct(cell: str) -> float | None:
    cell = cell.strip().rstrip("%").replace(",", "")
    try:
        return float(cell) / 100
    except ValueError:
        return None


def find(short: str) -> Path | None:
    """The trace a README short name (``kineto-tb_plugin/…/worker0.1623143089861``) means."""
    head, _, tail = short.strip("`").partition("…/")
    matches = sorted(p for p in TRACES.glob(f"{head.rstrip('/')}/**/{tail}*") if p.is_file()) if tail else \
        sorted(p for p in TRACES.glob(f"{head.split('/')[0]}/**/*") if p.is_file() and _short_matches(short, p))
    return matches[0] if matches else None


def _short_matches(short: str, p: Path) -> bool:
    rel = p.relative_to(TRACES).as_posix()
    return rel.startswith(short.strip("`").rstrip("…")) and p.name.endswith((".json", ".json.gz")) \
        and "output" not in rel.replace(short.strip("`"), "")


def exists() -> bool:
    return README.is_file()


__all__ = ["ROOT", "TRACES", "README", "SKIP", "measured_rows", "hta_rows", "pct", "find", "exists", "Path"]
