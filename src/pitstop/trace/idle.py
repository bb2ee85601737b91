"""Why the GPU sat idle (torch-free): each idle microsecond inside the window goes to the
first of input pipeline, sync, launch that covers it on the host, else to host work.

*Launch* is the host's path to the next GPU work: a launch call, a PyTorch operator that
launched GPU work (its dispatch, on the thread that launched), or a gap shorter than the launch
threshold between back-to-back GPU work. A step of many short kernels whose GPU idles there is
launch-bound: CUDA graphs replay it without that host path (PIT601). *Host* is what is left:
Python between operators, operators that launch nothing (CPU tensor work), no host event."""

from __future__ import annotations

import numpy as np

from pitstop.trace.model import OP_OPERATOR
from pitstop.trace.names import LAUNCH_CALLS, SYNC_CALLS, is_dataloader
from pitstop.trace.result import IdleSplit
from pitstop.trace.scope import Scope
from pitstop.trace.spans import Spans
from pitstop.thresholds import Thresholds

__all__ = ["idle_split", "idle_spans", "dataloader_spans", "sync_drain_spans", "dispatch_spans"]


def idle_spans(scope: Scope) -> Spans:
    """The window minus every GPU activity."""
    return scope.window.minus(scope.busy)


def dataloader_spans(scope: Scope) -> Spans:
    ops = scope.timeline.ops
    if not len(ops):
        return Spans.empty()
    mask = np.array([is_dataloader(n) for n in ops.names], dtype=bool)[ops.name]
    return Spans.of(ops.start[mask], ops.end[mask])


def _calls(scope: Scope, names: frozenset[str]) -> np.ndarray:
    rt = scope.timeline.runtime
    if not len(rt):
        return np.zeros(0, dtype=bool)
    return np.array([n in names for n in rt.names], dtype=bool)[rt.name]


def sync_drain_spans(scope: Scope) -> Spans:
    """From each sync call's start to the first launch call after it returned: the host could
    queue no work for that long, so the GPU queue drained."""
    rt = scope.timeline.runtime
    sync, launch = _calls(scope, SYNC_CALLS), _calls(scope, LAUNCH_CALLS)
    if not sync.any():
        return Spans.empty()
    launch_starts = rt.start[launch]
    ends = rt.end[sync]
    i = np.searchsorted(launch_starts, ends, side="left")
    nxt = np.where(i < len(launch_starts), launch_starts[np.clip(i, 0, max(len(launch_starts) - 1, 0))]
                   if len(launch_starts) else ends, ends)
    return Spans.of(rt.start[sync], np.maximum(nxt, ends))


def dispatch_spans(scope: Scope) -> Spans:
    """The PyTorch operators (not annotations) inside which their thread made a launch call:
    the host dispatching GPU work, from the operator's entry to its return."""
    ops, rt = scope.timeline.ops, scope.timeline.runtime
    launch = _calls(scope, LAUNCH_CALLS)
    if not len(ops) or not launch.any():
        return Spans.empty()
    hit = np.zeros(len(ops), dtype=bool)
    op_lanes = ops.lane
    for lane in np.unique(rt.lane[launch]):
        starts = np.sort(rt.start[launch & (rt.lane == lane)])
        on = (op_lanes == lane) & (ops.kind == OP_OPERATOR)
        hit[on] = np.searchsorted(starts, ops.end[on], side="left") > np.searchsorted(starts, ops.start[on], side="left")
    return Spans.of(ops.start[hit], ops.end[hit])


def idle_split(scope: Scope, th: Thresholds) -> IdleSplit | None:
    if not len(scope.timeline.gpu):
        return None
    win = scope.window.total
    if win <= 0:
        return None
    gaps = idle_spans(scope)
    dl = dataloader_spans(scope)
    input_part = gaps.intersect(dl)
    rest = gaps.minus(dl)
    sync_part = rest.intersect(sync_drain_spans(scope))
    rest = rest.minus(sync_part)
    rt = scope.timeline.runtime
    launch = _calls(scope, LAUNCH_CALLS)
    # short gaps between back-to-back GPU work: the GPU outran the host's launches
    length = gaps.end - gaps.start
    short = (length < th.launch_gap_us) & np.isin(gaps.start, scope.busy.end) & np.isin(gaps.end, scope.busy.start)
    dispatch = dispatch_spans(scope)
    launching = Spans.of(np.concatenate([rt.start[launch], gaps.start[short], dispatch.start]),
                         np.concatenate([rt.end[launch], gaps.end[short], dispatch.end]))
    launch_part = rest.intersect(launching)
    host = rest.minus(launching)
    return IdleSplit(input=input_part.total / win, host=host.total / win, launch=launch_part.total / win,
                     sync=sync_part.total / win)
