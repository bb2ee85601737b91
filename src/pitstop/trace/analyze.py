"""One trace file -> one :class:`~pitstop.trace.result.RankResult` (torch-free): the
analyzers of this package run in turn over the timeline's :class:`~pitstop.trace.scope.Scope`."""

from __future__ import annotations

from pathlib import Path


from pitstop.trace.busy import gpu_time, span_breakdown
from pitstop.trace.collectives import collectives
from pitstop.trace.compiled import compiled_work
from pitstop.trace.copies import copies
from pitstop.trace.host import data_loading, optimizer_kernels, syncs, top_operators
from pitstop.trace.idle import dataloader_spans, idle_split
from pitstop.trace.kernels import kernel_mix, launches, precision
from pitstop.trace.load import load_timeline
from pitstop.trace.model import Timeline
from pitstop.stats import StepTime
from pitstop.trace.result import DataLoading, RankResult, Syncs, Window
from pitstop.trace.scope import scope_of
from pitstop.thresholds import Thresholds

__all__ = ["analyze_timeline", "analyze_file", "step_time"]


def step_time(tl: Timeline) -> StepTime | None:
    if not tl.steps:
        return None
    return StepTime.of([float(s.duration) * 1e-6 for s in tl.steps])


def analyze_file(path: Path | str, th: Thresholds = Thresholds()) -> RankResult:
    """Load and analyse one trace file (:class:`~pitstop.trace.load.TraceError` when unreadable)."""
    return analyze_timeline(load_timeline(path), th)


def analyze_timeline(tl: Timeline, th: Thresholds = Thresholds()) -> RankResult:
    scope = scope_of(tl)
    dev = tl.device
    notes = []
    host_only = not len(tl.gpu)
    if host_only:
        notes.append("host-only trace: it holds no kernel, memcpy or memset event, so GPU busy, idle and kernel "
                     "time cannot be measured" + (f" (deviceProperties lists {dev.name})" if dev else ""))
    if not tl.steps:
        notes.append("no ProfilerStep#N in the trace: shares are over the span of GPU activity, step time is unknown")
    if not len(tl.ops) and len(tl.gpu):
        notes.append("no host operators in the trace: idle causes, DataLoader time and operators cannot be told")
    if dev and tl.gpu_devices and dev.id not in tl.gpu_devices:
        notes.append(f"GPU events carry device id {', '.join(map(str, tl.gpu_devices))}, which deviceProperties does "
                     f"not list; {dev.name} assumed")
    if scope is None:
        return RankResult(source=tl.source, rank=tl.rank if tl.rank is not None else 0,
                          world_size=tl.world_size or 1, device=dev.name if dev else "", vendor=dev.vendor if dev else "",
                          schema=tl.schema, steps=0, step_numbers=(), step_time=None, window=None, gpu=None,
                          idle=None, span=None, kernels=None, precision=None, launches=None,
                          syncs=Syncs(0.0, 0, 0.0, ()), copies=None, dataloader=DataLoading(None, None, None),
                          optimizer=None, top_operators=(), host_only=host_only, notes=tuple(notes))
    idle = idle_split(scope, th)
    loader = dataloader_spans(scope)
    return RankResult(
        source=tl.source, rank=tl.rank if tl.rank is not None else 0, world_size=tl.world_size or 1,
        device=dev.name if dev else "", vendor=dev.vendor if dev else "", schema=tl.schema,
        steps=len(tl.steps), step_numbers=tuple(s.number for s in tl.steps), step_time=step_time(tl),
        window=Window(scope.basis, scope.seconds, scope.window.first, scope.window.last),
        gpu=gpu_time(scope), idle=idle, span=span_breakdown(scope), kernels=kernel_mix(scope),
        precision=precision(scope), launches=launches(scope, th, idle.launch if idle else 0.0), syncs=syncs(scope),
        copies=copies(scope), dataloader=data_loading(scope, loader, idle.input if idle else None),
        optimizer=optimizer_kernels(scope), top_operators=top_operators(scope), host_only=host_only,
        notes=tuple(notes), collectives=collectives(scope), compiled=compiled_work(scope))
