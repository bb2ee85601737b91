"""A profiler trace (one file, or a folder of one job's per-rank files) as per-step samples for
``pitstop compare``, read with :mod:`pitstop.trace`'s loader (torch-free).

Per host ``ProfilerStep#N``:

- the step's wall time;
- phases that add up to it, from the GPU's point of view: ``compute`` (time any non-collective
  kernel ran), ``communication`` (collective kernels not hidden under compute), ``memcpy/memset``
  (copies not hidden under kernels) and ``gpu idle``; for a host-only trace instead
  ``DataLoader``, ``optimizer`` and ``other host`` from the host annotations;
- each kernel's GPU seconds in the step (by the step it started in);
- each operator's GPU self time in the step: the kernels whose launching runtime call (joined
  by ``correlation``) it is the innermost host operator around, on the same thread; in a
  host-only trace, its inclusive host time.

A folder's ranks are aligned step by step: the job's step is the slowest rank's, the rest are
means over ranks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pitstop.compare.model import CompareInputError, Side

__all__ = ["side_from_trace", "rank_samples", "RankSamples"]

RankSamples = tuple[list[float], dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]


def _per_step(names: tuple[str, ...], ids: np.ndarray, step: np.ndarray, secs: np.ndarray,
              n_steps: int) -> dict[str, list[float]]:
    keep = step >= 0
    ids, step, secs = ids[keep], step[keep], secs[keep]
    if not len(ids):
        return {}
    used, inverse = np.unique(ids, return_inverse=True)
    grid = np.bincount(step * len(used) + inverse, weights=secs, minlength=n_steps * len(used))
    grid = grid.reshape(n_steps, len(used))
    return {names[int(u)]: grid[:, j].tolist() for j, u in enumerate(used)}


def rank_samples(tl) -> RankSamples:
    """(step seconds, phases, kernels, operators) of one :class:`pitstop.trace.model.Timeline`."""
    from pitstop.trace.host import launching_ops
    from pitstop.trace.kernels import communication_rows
    from pitstop.trace.model import GPU_KERNEL
    from pitstop.trace.names import is_dataloader, is_optimizer_step
    from pitstop.trace.scope import step_index
    from pitstop.trace.spans import Spans

    steps = tl.steps
    starts = np.array([s.start for s in steps], dtype=np.float64)
    ends = np.array([s.end for s in steps], dtype=np.float64)
    n = len(steps)
    wall = [s.duration * 1e-6 for s in steps]
    g, ops = tl.gpu, tl.ops
    phases: dict[str, list[float]] = {}
    kernels: dict[str, list[float]] = {}
    operators: dict[str, list[float]] = {}
    if len(g):
        kern = g.kind == GPU_KERNEL
        comm = communication_rows(g)
        compute = Spans.of(g.start[kern & ~comm], g.end[kern & ~comm])
        kernels_all = Spans.of(g.start[kern], g.end[kern])
        comm_only = Spans.of(g.start[comm], g.end[comm]).minus(compute)
        mem_only = Spans.of(g.start[~kern], g.end[~kern]).minus(kernels_all)
        busy = Spans.of(g.start, g.end)
        for name, spans in (("compute", compute), ("communication", comm_only), ("memcpy/memset", mem_only)):
            phases[name] = [spans.covered(a, b) * 1e-6 for a, b in zip(starts, ends)]
        phases["gpu idle"] = [(b - a - busy.covered(a, b)) * 1e-6 for a, b in zip(starts, ends)]
        step = step_index(starts, ends, g.start)
        dur = (g.end - g.start) * 1e-6
        kernels = _per_step(g.names, g.name[kern], step[kern], dur[kern], n)
        if len(ops):
            op_row = launching_ops(tl)
            has = op_row >= 0
            operators = _per_step(ops.names, ops.name[op_row[has]], step[has], dur[has], n)
    elif len(ops):
        masks = {"DataLoader": np.array([is_dataloader(x) for x in ops.names], dtype=bool)[ops.name],
                 "optimizer": np.array([is_optimizer_step(x) for x in ops.names], dtype=bool)[ops.name]}
        for name, m in masks.items():
            spans = Spans.of(ops.start[m], ops.end[m])
            phases[name] = [spans.covered(a, b) * 1e-6 for a, b in zip(starts, ends)]
        phases["other host"] = [max(w - sum(p[i] for p in phases.values()), 0.0) for i, w in enumerate(wall)]
        step = step_index(starts, ends, ops.start)
        operators = _per_step(ops.names, ops.name, step, (ops.end - ops.start) * 1e-6, n)
    return wall, phases, kernels, operators


def _mean(rows: list[list[float]], k: int) -> tuple[float, ...]:
    return tuple(float(np.mean([r[i] if i < len(r) else 0.0 for r in rows])) for i in range(k))


def side_from_trace(path: str | Path) -> Side:
    """One trace file or a folder of per-rank files, as a :class:`Side` of ``kind="trace"``."""
    from pitstop.trace.job import trace_files
    from pitstop.trace.load import TraceError, load_timeline

    try:
        files = trace_files([Path(path)])
    except TraceError as exc:
        raise CompareInputError(str(exc)) from None
    per_rank, ranks, devices, notes = [], [], [], []
    for f in files:
        try:
            tl = load_timeline(f)
        except TraceError as exc:
            raise CompareInputError(str(exc)) from None
        if not tl.steps:
            raise CompareInputError(f"{f}: no ProfilerStep#N in the trace: nothing to compare step by step")
        per_rank.append(rank_samples(tl))
        ranks.append(tl.rank if tl.rank is not None else 0)
        dev = tl.device
        devices.append(dev.name if dev else "")
        if not len(tl.gpu):
            notes.append(f"{f.name}: host-only trace (no GPU events): phases and operators are host times")
        del tl  # one rank's timeline in memory at a time
    k = min(len(r[0]) for r in per_rank)
    steps = tuple(max(r[0][i] for r in per_rank) for i in range(k))
    merged = []
    for j in (1, 2, 3):
        names = sorted({name for r in per_rank for name in r[j]})
        merged.append({name: _mean([r[j].get(name, [0.0] * k) for r in per_rank], k) for name in names})
    if len(files) > 1:
        notes.append(f"{len(files)} ranks: the step is the slowest rank's, phases, kernels and operators the "
                     "mean over ranks")
    device = ", ".join(sorted({d for d in devices if d})) or "no GPU listed"
    return Side(kind="trace", path=str(path), device=device, steps=steps, phases=merged[0], kernels=merged[1],
                operators=merged[2], label=Path(path).name, ranks=tuple(sorted(set(ranks))), notes=tuple(notes))
