"""Read one input of ``pitstop compare`` into a :class:`~pitstop.compare.model.Side`.

Two kinds: a doctor report (``pitstop doctor --format json``: per-step wall times and phases
from its step records) and a profiler trace (a Kineto/Chrome trace file, gzipped or not, or a
folder of per-rank trace files: read by :mod:`pitstop.trace`; or a saved ``pitstop trace
--format json`` report, a summary without per-step samples). :func:`sniff` tells them apart
from the first bytes, so a large trace is never loaded twice.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from pitstop.compare.model import CompareInputError, Side

__all__ = ["CompareInputError", "sniff", "load_side", "side_from_report"]

_HEAD = 1 << 16
_TRACE_KEYS = ('"traceEvents"', '"schemaVersion"', '"deviceProperties"', '"displayTimeUnit"', '"distributedInfo"')


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            return f.read(_HEAD).decode("utf-8", errors="replace")
    except (OSError, EOFError) as exc:
        raise CompareInputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _is_trace_report(head: str) -> bool:
    """``pitstop trace --format json`` output (its JSON starts with its schema version)."""
    return head.startswith('{') and '"schema_version"' in head[:200] and '"ranks"' in head[:400]


def sniff(path: str | Path) -> str:
    """``"doctor"`` or ``"trace"``; :class:`CompareInputError` when it is neither."""
    p = Path(path)
    if not p.exists():
        raise CompareInputError(f"{p}: no such file or folder")
    if p.is_dir():
        return "trace"
    head = _head(p).lstrip()
    if not head.startswith("{"):
        raise CompareInputError(f"{p}: not JSON: neither a doctor report (pitstop doctor --format json) "
                                "nor a profiler trace")
    if any(k in head for k in _TRACE_KEYS) or _is_trace_report(head):
        return "trace"
    if '"schema"' in head and '"steps"' in head:
        return "doctor"
    raise CompareInputError(f"{p}: neither a doctor report (pitstop doctor --format json) nor a profiler trace")


def load_side(path: str | Path) -> Side:
    kind = sniff(path)
    if kind == "doctor":
        return side_from_report(path)
    if Path(path).is_file() and _is_trace_report(_head(Path(path)).lstrip()):
        from pitstop.compare.report_side import side_from_trace_report

        return side_from_trace_report(path)
    from pitstop.compare.trace_side import side_from_trace

    return side_from_trace(path)


def side_from_report(path: str | Path) -> Side:
    """A doctor report's observed steps: wall time and phases of each."""
    p = Path(path)
    try:
        report = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompareInputError(f"{p}: cannot read the doctor report: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("steps"), dict):
        raise CompareInputError(f"{p}: not a doctor report (no 'steps')")
    records = [r for r in report["steps"].get("records") or [] if r.get("kind") == "observed"
               and isinstance(r.get("wall"), (int, float))]
    if not records:
        raise CompareInputError(f"{p}: the doctor report has no observed step (outcome: "
                                f"{report.get('outcome', 'unknown')})")
    phases: dict[str, list[float]] = {}
    for i, r in enumerate(records):
        for name, secs in (r.get("phases") or {}).items():
            phases.setdefault(name, [0.0] * len(records))[i] = float(secs)
    device = report.get("device") or {}
    throughput = report.get("throughput") or {}
    notes = []
    if report.get("outcome") not in (None, "diagnosed"):
        notes.append(f"doctor outcome: {report.get('outcome')}")
    per_step = throughput.get("samples_per_step")
    label = f"{report.get('target', '?')}" + (f", {per_step:g} samples/step" if per_step else "")
    return Side(kind="doctor", path=str(p), device=str(device.get("name") or device.get("type") or ""),
                steps=tuple(float(r["wall"]) for r in records),
                phases={k: tuple(v) for k, v in phases.items()}, label=label, notes=tuple(notes))
