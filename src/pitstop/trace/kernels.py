"""What the GPU ran (torch-free): compute / communication / memory time, the overlap of
communication with compute, top kernels, launch overhead and the precision of matmuls."""

from __future__ import annotations

import numpy as np

from pitstop.trace.model import GPU_KERNEL, Table
from pitstop.trace.names import PRECISIONS, is_communication, is_elementwise, is_matmul, precision_of
from pitstop.trace.result import KernelMix, Launches, NamedTime, Precision
from pitstop.trace.scope import Scope
from pitstop.trace.spans import Spans
from pitstop.thresholds import Thresholds

__all__ = ["kernel_mix", "precision", "launches", "communication_mask", "communication_rows", "TOP"]

TOP = 10


def communication_rows(g: Table) -> np.ndarray:
    """The one communication mask: GPU rows that are NCCL/RCCL kernels (``names.is_communication``)."""
    per_name = np.array([is_communication(n) for n in g.names], dtype=bool)
    return per_name[g.name] & (g.kind == GPU_KERNEL) if len(g) else np.zeros(0, dtype=bool)


def communication_mask(scope: Scope) -> np.ndarray:
    return communication_rows(scope.timeline.gpu)


def kernel_mix(scope: Scope) -> KernelMix | None:
    g = scope.timeline.gpu
    if not len(g):
        return None
    rows = scope.gpu_in
    dur = np.zeros(len(g))
    dur[rows] = scope.clipped(rows)
    kern = rows & (g.kind == GPU_KERNEL)
    comm = kern & communication_mask(scope)
    compute = kern & ~comm
    k_total = float(dur[kern].sum())
    all_total = float(dur[rows].sum())
    c_total = float(dur[comm].sum())
    comm_spans = Spans.of(g.start[comm], g.end[comm]).intersect(scope.window)
    comp_spans = Spans.of(g.start[compute], g.end[compute])
    overlap = None
    exposed = 0.0
    if comm_spans.total > 0:
        overlap = comm_spans.intersect(comp_spans).total / comm_spans.total
        exposed = comm_spans.minus(comp_spans).total / scope.window.total
    per_step: tuple[float, ...] = ()
    if scope.steps and comm.any():
        per_step = tuple(comm_spans.covered(s.start, s.end) * 1e-6 for s in scope.timeline.steps)
    return KernelMix(
        kernel_seconds=k_total * 1e-6,
        compute_share=float(dur[compute].sum()) / k_total if k_total else 0.0,
        communication_share=c_total / k_total if k_total else 0.0,
        memory_share=(all_total - k_total) / all_total if all_total else 0.0,
        communication_overlap=overlap, communication_exposed=exposed, communication_per_step=per_step,
        top=_top(g.names, g.name[kern], dur[kern], k_total))


def _top(names: tuple[str, ...], ids: np.ndarray, dur: np.ndarray, total: float) -> tuple[NamedTime, ...]:
    if not len(ids):
        return ()
    secs = np.bincount(ids, weights=dur, minlength=len(names))
    calls = np.bincount(ids, minlength=len(names))
    order = np.argsort(-secs, kind="stable")[:TOP]
    return tuple(NamedTime(names[i], int(calls[i]), float(secs[i]) * 1e-6, float(secs[i]) / total if total else 0.0)
                 for i in order if calls[i])


def precision(scope: Scope) -> Precision | None:
    g = scope.timeline.gpu
    if not len(g):
        return None
    kern = scope.gpu_in & (g.kind == GPU_KERNEL)
    mm_name = np.array([is_matmul(n) for n in g.names], dtype=bool)
    mm = kern & mm_name[g.name]
    dur = scope.clipped(np.flatnonzero(kern))
    k_total = float(dur.sum())
    mm_dur = scope.clipped(np.flatnonzero(mm))
    mm_total = float(mm_dur.sum())
    labels = [precision_of(n) for n in g.names]
    by = {p: 0.0 for p in PRECISIONS}
    for i, d in zip(g.name[mm].tolist(), mm_dur.tolist()):
        by[labels[i]] += d
    shares = {p: v / mm_total for p, v in by.items() if v > 0} if mm_total else {}
    dev = scope.timeline.device
    return Precision(matmul_share=mm_total / k_total if k_total else 0.0, by_precision=shares,
                     fp32_share=shares.get("fp32", 0.0), tensor_cores=dev.tensor_cores if dev else None,
                     tf32_capable=bool(dev and dev.tf32))


def launches(scope: Scope, th: Thresholds, launch_idle: float) -> Launches | None:
    g = scope.timeline.gpu
    kern = scope.gpu_in & (g.kind == GPU_KERNEL)
    if not kern.any():
        return None
    dur = (g.end - g.start)[kern]
    pointwise = np.array([is_elementwise(n) for n in g.names], dtype=bool)[g.name[kern]]
    return Launches(kernels_per_step=int(kern.sum()) / scope.per_step_divisor, median_kernel_us=float(np.median(dur)),
                    short_kernels=float(np.mean(dur < th.short_kernel_us)), short_threshold_us=th.short_kernel_us,
                    idle_share=launch_idle, elementwise=float(np.mean(pointwise)))
