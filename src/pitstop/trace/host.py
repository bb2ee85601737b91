"""What the host did (torch-free): syncs and their causes, DataLoader time, the optimizer's
kernels, and operators ranked by the GPU time they launched."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from pitstop.trace.model import GPU_KERNEL, Table
from pitstop.trace.names import SYNC_CALLS, is_optimizer_step
from pitstop.trace.result import DataLoading, NamedTime, OptimizerKernels, SyncSite, Syncs
from pitstop.trace.scope import Scope, in_rows
from pitstop.trace.spans import Spans

__all__ = ["syncs", "data_loading", "optimizer_kernels", "top_operators", "op_by_external", "launching_ops"]

_MAX_SITES = 400  # sync calls looked up for their cause (the rest are counted only)


def op_by_external(ops: Table) -> dict[int, int]:
    """External id -> the operator row that carries it."""
    ok = np.flatnonzero(ops.external >= 0)
    return dict(zip(ops.external[ok].tolist(), ok.tolist()))


def _user_frame(stack: str) -> str:
    """The innermost frame of a 2021 ``Call stack`` outside the Python installation."""
    frames = [f for f in stack.split(";") if f]
    for f in frames:  # innermost first
        if "site-packages" not in f and "/lib/python" not in f:
            return f
    return frames[0] if frames else ""


def _python_frame(scope: Scope, start: float, end: float) -> str:
    py = scope.timeline.python
    if not len(py):
        return ""
    hi = int(np.searchsorted(py.start, start, side="right"))
    cand = np.flatnonzero(py.end[:hi] >= end)
    for row in cand[::-1]:
        name = py.name_of(int(row))
        if ".py(" in name and "site-packages" not in name and "/torch/" not in name and not name.startswith("threading"):
            return name
    return ""


def syncs(scope: Scope) -> Syncs:
    rt = scope.timeline.runtime
    if not len(rt):
        return Syncs(0.0, 0, 0.0, ())
    is_sync = np.array([n in SYNC_CALLS for n in rt.names], dtype=bool)[rt.name]
    rows = np.flatnonzero(is_sync & in_rows(rt, scope.window))
    ops = scope.timeline.ops
    by_ext = op_by_external(ops)
    sites: dict[tuple[str, str], list[float]] = defaultdict(list)
    for n, row in enumerate(rows.tolist()):
        call = rt.name_of(row)
        cause = "unknown"
        if n < _MAX_SITES:
            op = by_ext.get(int(rt.external[row]))
            if op is not None:
                cause = ops.name_of(op)
                frame = _user_frame(ops.stack_of(op))
                if frame:
                    cause += f" at {frame}"
            frame = _python_frame(scope, float(rt.start[row]), float(rt.end[row]))
            if frame:
                cause = f"{cause} from {frame}" if cause != "unknown" else frame
        sites[(call, cause)].append(float(rt.end[row] - rt.start[row]))
    secs = float(sum(sum(v) for v in sites.values()))
    out = sorted((SyncSite(call, cause, len(v), sum(v) * 1e-6) for (call, cause), v in sites.items()),
                 key=lambda s: (-s.count, -s.seconds))
    return Syncs(per_step=len(rows) / scope.per_step_divisor, count=len(rows),
                 seconds_share=secs / scope.window.total if scope.window.total else 0.0, sites=tuple(out[:10]))


def data_loading(scope: Scope | None, loader: Spans, exposed: float | None) -> DataLoading:
    if scope is None or not scope.steps or not len(scope.timeline.ops):
        return DataLoading(None, None, None)
    host = loader.intersect(scope.window).total
    return DataLoading(share=exposed, host_share=host / scope.window.total,
                       seconds_per_step=host * 1e-6 / scope.per_step_divisor)


def optimizer_kernels(scope: Scope) -> OptimizerKernels | None:
    ops, g = scope.timeline.ops, scope.timeline.gpu
    if not len(ops) or not len(g):
        return None
    mask = np.array([is_optimizer_step(n) for n in ops.names], dtype=bool)[ops.name]
    if not mask.any():
        return None
    spans = Spans.of(ops.start[mask], ops.end[mask]).intersect(scope.window)
    kern = scope.gpu_in & (g.kind == GPU_KERNEL) & ~np.isnan(scope.launch_ts)
    inside = kern.copy()
    inside[kern] = spans.contains(scope.launch_ts[kern])
    names = {g.names[i] for i in np.unique(g.name[inside]).tolist()}
    multi = any("multi_tensor_apply" in n or "fused" in n.lower() for n in names)
    dur = float(scope.clipped(np.flatnonzero(inside)).sum())
    return OptimizerKernels(kernels_per_step=int(inside.sum()) / scope.per_step_divisor,
                            share=dur / scope.window.total if scope.window.total else 0.0, multi_tensor=multi)


def top_operators(scope: Scope, top: int = 10) -> tuple[NamedTime, ...]:
    """Operators by the GPU time of the kernels they launched themselves (self time)."""
    ops, g = scope.timeline.ops, scope.timeline.gpu
    if not len(ops) or not len(g):
        return ()
    link = launching_ops(scope.timeline)
    rows = np.flatnonzero(scope.gpu_in)
    dur = scope.clipped(rows)
    secs: dict[str, float] = defaultdict(float)
    calls: dict[str, set[int]] = defaultdict(set)
    for row, d in zip(rows.tolist(), dur.tolist()):
        op = int(link[row])
        if op < 0:
            continue
        name = ops.name_of(op)
        secs[name] += d
        calls[name].add(op)
    total = float(dur.sum())
    best = sorted(secs, key=lambda k: -secs[k])[:top]
    return tuple(NamedTime(n, len(calls[n]), secs[n] * 1e-6, secs[n] / total if total else 0.0) for n in best)


def launching_ops(tl) -> np.ndarray:
    """For each GPU row, the host operator row that launched it (-1: unknown): the innermost
    operator, on the launching thread, around the runtime call with the row's correlation."""
    g, rt, ops = tl.gpu, tl.runtime, tl.ops
    out = np.full(len(g), -1, dtype=np.int64)
    if not len(g) or not len(rt) or not len(ops):
        return out
    call = {c: i for i, c in enumerate(rt.correlation.tolist()) if c >= 0}
    lanes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for lane in np.unique(ops.lane).tolist():
        rows = np.flatnonzero(ops.lane == lane)  # sorted by start, as the table is
        lanes[lane] = (rows, ops.start[rows], ops.end[rows])
    for row, corr in enumerate(g.correlation.tolist()):
        r = call.get(corr)
        if r is None or int(rt.lane[r]) not in lanes:
            continue
        rows, starts, ends = lanes[int(rt.lane[r])]
        t = float(rt.start[r])
        k = int(np.searchsorted(starts, t, side="right")) - 1
        for j in range(k, max(k - 64, -1), -1):  # back over siblings that ended before t
            if ends[j] > t:
                out[row] = rows[j]
                break
    return out
