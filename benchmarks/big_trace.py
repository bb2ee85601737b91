"""Make a large Kineto trace from a real one by repeating its profiled window.

    python benchmarks/big_trace.py SOURCE.json[.gz] OUT.json --size-mb 1024

The source's events (all but the ``M`` metadata, written once) are written again and again,
each copy shifted after the previous one in time, with every id that links events made unique
per copy: flow ids (``id`` of ``s``/``f`` events), ``args`` ``External id``, ``correlation``,
``Profiler Event Index``, ``Sequence number``, ``Record function id``, ``Ev Idx``, ``Python id``
and ``Python parent id``; ``ProfilerStep#N`` is renumbered so that steps stay distinct. The
result reads like one long profiling session of the same job (same devices, same ranks), which
is what a 1 GB trace is in practice. The output is plain JSON (not gzipped), written in one pass
with bounded memory beyond the source itself.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["make_big_trace", "ID_ARGS"]

ID_ARGS = ("External id", "correlation", "Profiler Event Index", "Sequence number", "Record function id",
           "Ev Idx", "Python id", "Python parent id")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _shifts(events: list[dict[str, Any]]) -> tuple[float, float, dict[str, int], int, int]:
    """(start, period, per-arg id stride, flow id stride, step stride) of one copy."""
    start, end = float("inf"), float("-inf")
    strides = dict.fromkeys(ID_ARGS, 0)
    flow, steps = 0, []
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)):
            start, end = min(start, ts), max(end, ts + float(e.get("dur") or 0))
        if isinstance(e.get("id"), int):
            flow = max(flow, e["id"])
        for k, v in (e.get("args") or {}).items():
            if k in strides and isinstance(v, int):
                strides[k] = max(strides[k], v)
        m = _STEP.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    period = (end - start) * 1.01 + 1000.0  # a 1% + 1 ms gap between copies
    return start, period, {k: v + 1 for k, v in strides.items()}, flow + 1, step_stride


def _copy(e: dict[str, Any], k: int, period: float, strides: dict[str, int], flow: int, step: int) -> dict[str, Any]:
    out = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)):
        shifted = ts + k * period
        out["ts"] = round(shifted, 3) if isinstance(ts, float) else int(shifted)
    if isinstance(e.get("id"), int):
        out["id"] = e["id"] + k * flow
    args = e.get("args")
    if args:
        new = dict(args)
        for key, stride in strides.items():
            v = args.get(key)
            if isinstance(v, int) and v >= 0:
                new[key] = v + k * stride
        out["args"] = new
    m = _STEP.match(str(e.get("name", "")))
    if m and step:
        out["name"] = f"ProfilerStep#{int(m.group(1)) + k * step}"
    return out


def make_big_trace(source: Path, out: Path, size_bytes: int) -> dict[str, Any]:
    """Write ``out`` (about ``size_bytes``, never less) from ``source``; returns what it did."""
    doc = _load(Path(source))
    events = doc.get("traceEvents") or []
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    start, period, strides, flow, step = _shifts(body)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    copies = written = 0
    with open(tmp, "w", encoding="utf-8") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        text = json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n'
        f.write(text)
        written += len(text)
        first = True
        for e in meta:
            line = ("" if first else ",\n") + json.dumps(e, separators=(",", ":"))
            f.write(line)
            written, first = written + len(line), False
        while copies == 0 or written < size_bytes:
            for e in body:
                line = ("" if first else ",\n") + json.dumps(_copy(e, copies, period, strides, flow, step),
                                                             separators=(",", ":"))
                f.write(line)
                written, first = written + len(line), False
            copies += 1
        f.write("\n]}\n")
    tmp.replace(out)
    return {"source": str(source), "out": str(out), "bytes": out.stat().st_size, "copies": copies,
            "events": len(meta) + copies * len(body), "steps": copies * step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mb", type=float, default=1024.0)
    a = ap.parse_args()
    print(json.dumps(make_big_trace(a.source, a.out, int(a.size_mb * 1024 * 1024))))


if __name__ == "__main__":
    main()
