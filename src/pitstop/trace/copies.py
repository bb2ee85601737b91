"""Host-device copies and memsets (torch-free): pageable or pinned, overlapped or not."""

from __future__ import annotations

import numpy as np

from pitstop.trace.model import COPY_PAGEABLE, COPY_PINNED, COPY_UNKNOWN, GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET
from pitstop.trace.result import Copies
from pitstop.trace.scope import Scope
from pitstop.trace.spans import Spans

__all__ = ["copies"]


def copies(scope: Scope) -> Copies | None:
    g = scope.timeline.gpu
    if not len(g):
        return None
    cp = scope.gpu_in & (g.kind == GPU_MEMCPY)
    ms = scope.gpu_in & (g.kind == GPU_MEMSET)
    names = g.names
    htod_name = np.array(["HtoD" in n for n in names], dtype=bool)
    dtoh_name = np.array(["DtoH" in n for n in names], dtype=bool)
    host = cp & (htod_name[g.name] | dtoh_name[g.name])
    win = scope.window.total
    pageable = host & (g.flag == COPY_PAGEABLE)
    cp_dur = float(scope.clipped(np.flatnonzero(host)).sum())
    overlap = None
    if host.any():
        spans = Spans.of(g.start[host], g.end[host])
        kern = scope.gpu_in & (g.kind == GPU_KERNEL)
        overlap = spans.intersect(Spans.of(g.start[kern], g.end[kern])).total / spans.total if spans.total else None
    return Copies(pageable=int(pageable.sum()), pinned=int((host & (g.flag == COPY_PINNED)).sum()),
                  unknown=int((host & (g.flag == COPY_UNKNOWN)).sum()),
                  htod=int((cp & htod_name[g.name]).sum()), dtoh=int((cp & dtoh_name[g.name]).sum()),
                  copy_share=cp_dur / win if win else 0.0,
                  pageable_share=float(scope.clipped(np.flatnonzero(pageable)).sum()) / win if win else 0.0,
                  copy_overlap=overlap, memsets_per_step=int(ms.sum()) / scope.per_step_divisor,
                  memset_share=float(scope.clipped(np.flatnonzero(ms)).sum()) / win if win else 0.0)
