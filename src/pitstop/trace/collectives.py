"""The collectives of one trace by kind, and FSDP's per unit (torch-free, PIT705).

**GPU traces.** Every NCCL/RCCL kernel (``names.is_communication``) is given its kind from its
name (``ncclDevKernel_AllGather_RING_LL``, ``ncclKernel_ReduceScatter_…``, ``…AllReduce…``);
a kernel whose name does not say (RCCL's ``ncclDevKernel_Generic``) takes the kind of the host
operator that launched it (same ``External id``: ``nccl:all_gather``, ``nccl:_reduce_scatter_base``,
``c10d::_allgather_base_``, ``record_param_comms`` …). Its *exposed* part is the part no compute
kernel (any stream) ran beside: the time the step waited for it. Each kernel belongs to the FSDP
unit whose host annotation launched it: FSDP2 marks ``FSDP::all_gather (blocks.3)`` and
``FSDP::post_backward_reduce (blocks.3)`` (the root's carry no name).

**CPU traces** (gloo: no kernels). A collective blocks the training thread, so all of it is
exposed: the host time inside FSDP2's ``FSDP::all_gather*`` and ``FSDP::post_backward_reduce*``
annotations, or, without them (FSDP1, DDP), inside the ``c10d::`` operators of each kind.

FSDP2 with one unit at the root only shows all-gathers annotated without a unit name and none
with one (:attr:`~pitstop.trace.result.Collectives.root_only`).
"""

from __future__ import annotations

import re

import numpy as np

from pitstop.trace.kernels import communication_rows
from pitstop.trace.model import GPU_KERNEL, OP_ANNOTATION, Table
from pitstop.trace.result import CollectiveTime, Collectives, UnitTime
from pitstop.trace.scope import Scope
from pitstop.trace.spans import Spans

__all__ = ["collectives", "kernel_kind", "op_kind", "fsdp_unit", "KINDS"]

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "other")

_KERNEL = (("all_gather", re.compile(r"all_?gather", re.I)), ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
           ("all_reduce", re.compile(r"all_?reduce", re.I)))
_OP = (("all_gather", re.compile(r"all_?gather|allgather", re.I)),
       ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
       ("all_reduce", re.compile(r"all_?reduce", re.I)))
_COMM_OP = re.compile(r"^(nccl|rccl|gloo|c10d)[:_]|^record_param_comms$")
#: FSDP2's annotations: ``FSDP::all_gather (blocks.0)``, ``FSDP::post_backward_reduce``, ...
_FSDP2 = re.compile(r"^FSDP::(all_gather|all_gather_copy_out|post_backward_reduce)(?: \((?P<unit>[^)]*)\))?$")
#: FSDP1's host marks (its record_function names)
_FSDP1 = re.compile(r"^FullyShardedDataParallel\.")


def kernel_kind(name: str) -> str | None:
    """A collective kernel's kind from its name; None when the name does not say."""
    for kind, pattern in _KERNEL:
        if pattern.search(name):
            return kind
    return None


def op_kind(name: str) -> str | None:
    """A host collective operator's kind (``nccl:all_gather``, ``c10d::_reduce_scatter_base_``);
    None for a name that is no collective operator."""
    if not _COMM_OP.search(name):
        return None
    for kind, pattern in _OP:
        if pattern.search(name):
            return kind
    return "other"


def fsdp_unit(name: str) -> tuple[str, str] | None:
    """``(kind, unit)`` of an FSDP2 annotation (unit ``""``: the root), else None."""
    m = _FSDP2.match(name)
    if m is None:
        return None
    return ("reduce_scatter" if m.group(1) == "post_backward_reduce" else "all_gather"), m.group("unit") or ""


def _fsdp2_rows(ops: Table, window: Spans) -> tuple[np.ndarray, list[tuple[str, str]]]:
    rows = np.flatnonzero((ops.kind == OP_ANNOTATION) & window.contains(ops.start)) if len(ops) else np.zeros(0, int)
    keep, tags = [], []
    for r in rows.tolist():
        tag = fsdp_unit(ops.name_of(r))
        if tag is not None:
            keep.append(r)
            tags.append(tag)
    return np.array(keep, dtype=np.int64), tags


def _framework(ops: Table, fsdp2: np.ndarray) -> str:
    if len(fsdp2):
        return "fsdp2"
    if len(ops) and any(_FSDP1.match(n) for n in ops.names):
        return "fsdp1"
    return ""


def _per_step(spans: Spans, scope: Scope) -> tuple[float, ...]:
    return tuple(spans.covered(s.start, s.end) * 1e-6 for s in scope.timeline.steps)


def _kind_times(scope: Scope, spans: dict[str, Spans], exposed: dict[str, Spans], calls: dict[str, int]) -> tuple:
    win, div = scope.window, scope.per_step_divisor
    out = []
    for kind in KINDS:
        if kind not in spans:
            continue
        busy, hidden = spans[kind].intersect(win), exposed[kind].intersect(win)
        out.append(CollectiveTime(kind=kind, calls_per_step=calls[kind] / div, seconds_per_step=busy.total * 1e-6 / div,
                                  exposed_per_step=hidden.total * 1e-6 / div,
                                  exposed_share=hidden.total / win.total if win.total else 0.0))
    return tuple(out)


def _gpu(scope: Scope, comm: np.ndarray, fsdp2: np.ndarray, tags: list[tuple[str, str]]) -> Collectives:
    tl = scope.timeline
    g, ops = tl.gpu, tl.ops
    compute_rows = scope.gpu_in & (g.kind == GPU_KERNEL) & ~comm
    compute = Spans.of(g.start[compute_rows], g.end[compute_rows])
    rows = np.flatnonzero(comm)
    by_name = {i: kernel_kind(g.names[i]) for i in np.unique(g.name[rows]).tolist()}  # one regex per name
    kinds = np.array([by_name[int(i)] or "" for i in g.name[rows]], dtype=object)
    if (kinds == "").any():  # the name does not say (RCCL's generic kernel): the launching operator does
        ext_kind: dict[int, str] = {}
        for r in np.flatnonzero(ops.external >= 0).tolist() if len(ops) else ():
            k = op_kind(ops.name_of(r))
            if k is not None:
                ext_kind.setdefault(int(ops.external[r]), k)
        for j in np.flatnonzero(kinds == "").tolist():
            kinds[j] = ext_kind.get(int(g.external[rows[j]]), "other")
    spans, calls = {}, {}
    for kind in KINDS:
        mine = rows[kinds == kind]
        if len(mine):
            spans[kind] = Spans.of(g.start[mine], g.end[mine])
            calls[kind] = len(mine)
    exposed = {k: sp.minus(compute) for k, sp in spans.items()}
    units: dict[str, list[float]] = {}
    if len(fsdp2):  # each kernel's unit: the FSDP2 annotation its launch fell in
        ann_start, ann_end = ops.start[fsdp2], ops.end[fsdp2]
        for j, r in enumerate(rows.tolist()):
            launch = scope.launch_ts[r]
            if kinds[j] not in exposed or np.isnan(launch):
                continue
            inside = np.flatnonzero((ann_start <= launch) & (launch < ann_end))
            if len(inside):
                k, unit = tags[int(inside[-1])]
                part = exposed[kinds[j]].covered(max(g.start[r], scope.window.first), min(g.end[r], scope.window.last))
                units.setdefault(unit, [0.0, 0.0])[0 if k == "all_gather" else 1] += part
    return _result(scope, "gpu kernels", _framework(ops, fsdp2), spans, exposed, calls, units, tags)


def _host(scope: Scope, fsdp2: np.ndarray, tags: list[tuple[str, str]]) -> Collectives | None:
    ops = scope.timeline.ops
    starts: dict[str, list] = {}
    ends: dict[str, list] = {}
    calls: dict[str, int] = {}
    units: dict[str, list[float]] = {}
    if len(fsdp2):
        for r, (kind, unit) in zip(fsdp2.tolist(), tags):
            starts.setdefault(kind, []).append(ops.start[r])
            ends.setdefault(kind, []).append(ops.end[r])
            if not ops.name_of(r).startswith("FSDP::all_gather_copy_out"):
                calls[kind] = calls.get(kind, 0) + 1
            row = units.setdefault(unit, [0.0, 0.0])
            row[0 if kind == "all_gather" else 1] += float(ops.end[r] - ops.start[r])
    else:
        inside = scope.window.contains(ops.start) if len(ops) else np.zeros(0, dtype=bool)
        for r in np.flatnonzero(inside).tolist():
            name = ops.name_of(r)
            kind = op_kind(name) if name.startswith("c10d::") else None
            if kind is None:
                continue
            starts.setdefault(kind, []).append(ops.start[r])
            ends.setdefault(kind, []).append(ops.end[r])
            calls[kind] = calls.get(kind, 0) + 1
    if not starts:
        return None
    spans = {k: Spans.of(starts[k], ends[k]) for k in starts}
    return _result(scope, "host (blocking collectives)", _framework(ops, fsdp2), spans, spans, calls, units, tags)


def _result(scope: Scope, source: str, framework: str, spans: dict[str, Spans], exposed: dict[str, Spans],
            calls: dict[str, int], units: dict[str, list[float]], tags: list[tuple[str, str]]) -> Collectives:
    for kind in spans:
        calls.setdefault(kind, 0)
    fsdp = [exposed[k] for k in ("all_gather", "reduce_scatter") if k in exposed]
    both = Spans.of(np.concatenate([s.start for s in fsdp]), np.concatenate([s.end for s in fsdp])) if fsdp \
        else Spans.empty()
    div = scope.per_step_divisor
    named = {u for k, u in tags if k == "all_gather"}
    unit_times = tuple(UnitTime(unit=u, all_gather_s=v[0] * 1e-6 / div, reduce_scatter_s=v[1] * 1e-6 / div)
                       for u, v in sorted(units.items(), key=lambda kv: -(kv[1][0] + kv[1][1])))
    return Collectives(source=source, sharding=framework, kinds=_kind_times(scope, spans, exposed, calls),
                       units=unit_times, fsdp_exposed_per_step=_per_step(both, scope) if scope.steps else (),
                       fsdp_exposed_share=both.intersect(scope.window).total / scope.window.total if scope.window.total
                       else 0.0, root_only=framework == "fsdp2" and named == {""})


def collectives(scope: Scope) -> Collectives | None:
    """The collectives of the window (None: the trace holds none)."""
    tl = scope.timeline
    fsdp2, tags = _fsdp2_rows(tl.ops, scope.window)
    g = tl.gpu
    comm = communication_rows(g) & scope.gpu_in if len(g) else np.zeros(0, dtype=bool)
    if len(g):  # a GPU trace: the kernels say it (none: no collective ran on the GPU, e.g. one rank)
        return _gpu(scope, comm, fsdp2, tags) if comm.any() else None
    return _host(scope, fsdp2, tags)
