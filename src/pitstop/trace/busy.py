"""GPU busy and idle (torch-free): all streams merged, inside the window, over the work the
steps launched, and HolisticTraceAnalysis' temporal breakdown over the GPU span."""

from __future__ import annotations

import numpy as np

from pitstop.trace.model import GPU_KERNEL, Timeline
from pitstop.trace.kernels import communication_rows
from pitstop.trace.result import GpuTime, SpanBreakdown
from pitstop.trace.scope import Scope
from pitstop.trace.spans import Spans

__all__ = ["gpu_time", "span_breakdown"]


def gpu_time(scope: Scope) -> GpuTime | None:
    g = scope.timeline.gpu
    if not len(g):
        return None
    win = scope.window.total
    busy = scope.busy.intersect(scope.window).total
    launched = scope.launched_in >= 0
    busy_launched = None
    if scope.steps and launched.any():
        own = Spans.of(g.start[launched], g.end[launched])
        span = own.last - own.first
        busy_launched = own.total / span if span > 0 else None
    elif not scope.steps:
        busy_launched = busy / win if win > 0 else None
    return GpuTime(busy=busy / win if win > 0 else 0.0, idle=1 - busy / win if win > 0 else 1.0,
                   busy_seconds=busy * 1e-6, busy_launched=busy_launched,
                   streams=len(set(zip(g.device[scope.gpu_in].tolist(), g.lane[scope.gpu_in].tolist()))),
                   devices=len(np.unique(g.device)))


def span_breakdown(scope: Scope) -> SpanBreakdown | None:
    """HTA's ``get_temporal_breakdown`` reproduced: GPU span, last step's work dropped (two or
    more steps; work HTA cannot tie to a runtime call of a step goes too), whole microseconds; ``compute`` = non-communication kernels, ``non_compute``
    = the rest of the busy time (communication, memcpy, memset)."""
    tl: Timeline = scope.timeline
    g = tl.gpu
    if not len(g):
        return None
    keep = np.ones(len(g), dtype=bool)
    if scope.steps >= 2:  # HTA keeps the work it can tie to a step's runtime call, last step dropped
        keep = (scope.launched_in >= 0) & (scope.launched_in != scope.steps - 1)
    start = np.round(g.start[keep])
    end = start + np.round(g.end[keep] - g.start[keep])
    if not len(start):
        return None
    compute = (g.kind[keep] == GPU_KERNEL) & ~communication_rows(g)[keep]
    all_busy = Spans.of(start, end).total
    comp = Spans.of(start[compute], end[compute]).total
    span = float(end.max() - start.min())
    if span <= 0:
        return None
    return SpanBreakdown(idle=1 - all_busy / span, compute=comp / span, non_compute=(all_busy - comp) / span,
                         span_us=span)
