"""The analysed window of one timeline and the joins every analyzer needs (torch-free):
steps, the window they make, which GPU work each step launched, the GPU busy spans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pitstop.trace.model import GPU_KERNEL, Table, Timeline
from pitstop.trace.spans import Spans

__all__ = ["Scope", "scope_of", "launch_times", "in_rows", "step_index"]


@dataclass(frozen=True, eq=False)
class Scope:
    """``window``: the step intervals (or the GPU span when the trace has no steps);
    ``gpu_in``: GPU rows that overlap the window's extent; ``busy``: the union of all GPU
    activity; ``launched_in``: step index that launched each GPU row (-1: none or unknown)."""

    timeline: Timeline
    window: Spans
    basis: str
    steps: int
    busy: Spans
    gpu_in: np.ndarray
    launched_in: np.ndarray
    launch_ts: np.ndarray

    @property
    def seconds(self) -> float:
        return self.window.total * 1e-6

    @property
    def per_step_divisor(self) -> int:
        return max(self.steps, 1)

    def clipped(self, rows: np.ndarray) -> np.ndarray:
        """Durations of GPU rows ``rows`` clipped to the window's extent (us)."""
        g = self.timeline.gpu
        lo, hi = self.window.first, self.window.last
        return np.clip(np.minimum(g.end[rows], hi) - np.maximum(g.start[rows], lo), 0, None)


def launch_times(gpu: Table, runtime: Table) -> np.ndarray:
    """Start time of the runtime call that launched each GPU row (NaN when unknown)."""
    out = np.full(len(gpu), np.nan)
    ok = runtime.correlation >= 0
    corr, ts = runtime.correlation[ok], runtime.start[ok]
    if not len(corr) or not len(gpu):
        return out
    order = np.argsort(corr, kind="stable")
    corr, ts = corr[order], ts[order]
    i = np.searchsorted(corr, gpu.correlation)
    i = np.clip(i, 0, len(corr) - 1)
    hit = (corr[i] == gpu.correlation) & (gpu.correlation >= 0)
    out[hit] = ts[i[hit]]
    return out


def step_index(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Index of the step (sorted ``starts``/``ends``) each time falls in; -1: none. The one
    join of times to steps (the launching call's time ties GPU work to its step)."""
    k = np.searchsorted(starts, times, side="right") - 1
    ok = (k >= 0) & (times < ends[np.clip(k, 0, None)])
    return np.where(ok, k, -1)


def in_rows(table: Table, spans: Spans) -> np.ndarray:
    """Boolean mask: rows of ``table`` whose start lies inside ``spans``."""
    return spans.contains(table.start) if len(table) else np.zeros(0, dtype=bool)


def scope_of(tl: Timeline) -> Scope | None:
    """The window of ``tl``; None for a trace with neither steps nor GPU activity."""
    gpu = tl.gpu
    busy = Spans.of(gpu.start, gpu.end) if len(gpu) else Spans.empty()
    if tl.steps:
        window = Spans.of([s.start for s in tl.steps], [s.end for s in tl.steps])
        basis = "steps"
    elif len(busy):
        window = Spans.of([busy.first], [busy.last])
        basis = "gpu span"
    else:
        return None
    launch_ts = launch_times(gpu, tl.runtime)
    launched_in = np.full(len(gpu), -1, dtype=np.int64)
    if tl.steps and len(gpu):
        starts = np.array([s.start for s in tl.steps])
        ends = np.array([s.end for s in tl.steps])
        known = ~np.isnan(launch_ts)
        launched_in[np.flatnonzero(known)] = step_index(starts, ends, launch_ts[known])
    gpu_in = (gpu.end > window.first) & (gpu.start < window.last) if len(gpu) else np.zeros(0, dtype=bool)
    return Scope(tl, window, basis, len(tl.steps), busy, gpu_in, launched_in, launch_ts)


def kernel_rows(scope: Scope) -> np.ndarray:
    g = scope.timeline.gpu
    return scope.gpu_in & (g.kind == GPU_KERNEL)
