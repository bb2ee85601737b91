"""What ran compiled (torch-free): ``torch.compile``'s regions and graphs, CUDA graph replays and
the kernels left to run one launch at a time.

Host operators name the compiled program: dynamo's ``Torch-Compiled Region: N/M`` around each
entry into compiled code, AOTAutograd's ``CompiledFunction`` around each run of a compiled
graph with gradients (``CompiledFunctionBackward`` in its backward); a CUDA graph replay is a
``cudaGraphLaunch`` (``hipGraphLaunch``) runtime call whose correlation id the replayed kernels
carry. Inductor's kernels are named ``triton_…`` on GPUs. A kernel is *eager* when it is none of
these: not Triton, not replayed by a graph, not launched while compiled code ran.
"""

from __future__ import annotations

import numpy as np

from pitstop.trace.model import GPU_KERNEL
from pitstop.trace.names import is_elementwise
from pitstop.trace.result import CompiledWork
from pitstop.trace.scope import Scope, in_rows
from pitstop.trace.spans import Spans

__all__ = ["compiled_work", "REGION", "GRAPH", "GRAPH_LAUNCHES"]

#: the prefix of dynamo's annotation around compiled code
REGION = "Torch-Compiled Region"
#: AOTAutograd's autograd.Function around a compiled graph's run (forward and backward)
GRAPH, GRAPH_BACKWARD = "CompiledFunction", "CompiledFunctionBackward"
#: the runtime calls that replay a captured graph
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})


def _is_compiled_op(name: str) -> bool:
    return name.startswith(REGION) or name in (GRAPH, GRAPH_BACKWARD)


def compiled_work(scope: Scope) -> CompiledWork:
    tl = scope.timeline
    ops, rt, g = tl.ops, tl.runtime, tl.gpu
    per = scope.per_step_divisor
    regions = graphs = 0
    spans = Spans.empty()
    if len(ops):
        inside = in_rows(ops, scope.window)
        region = np.array([n.startswith(REGION) for n in ops.names], dtype=bool)[ops.name]
        graph = np.array([n == GRAPH for n in ops.names], dtype=bool)[ops.name]
        regions, graphs = int((region & inside).sum()), int((graph & inside).sum())
        comp = np.array([_is_compiled_op(n) for n in ops.names], dtype=bool)[ops.name]
        spans = Spans.of(ops.start[comp], ops.end[comp])
    launches = 0
    graph_corr = np.zeros(0, dtype=np.int64)
    if len(rt):
        is_launch = np.array([n in GRAPH_LAUNCHES for n in rt.names], dtype=bool)[rt.name]
        launches = int((is_launch & in_rows(rt, scope.window)).sum())
        graph_corr = rt.correlation[is_launch & (rt.correlation >= 0)]
    kern = scope.gpu_in & (g.kind == GPU_KERNEL) if len(g) else np.zeros(0, dtype=bool)
    n_kern = int(kern.sum())
    if not n_kern:
        return CompiledWork(regions_per_step=regions / per, graphs_per_step=graphs / per,
                            graph_launches_per_step=launches / per, graphed_share=0.0, triton_share=0.0,
                            eager_kernels_per_step=0.0, eager_elementwise=0.0)
    rows = np.flatnonzero(kern)
    triton = np.array(["triton_" in n for n in g.names], dtype=bool)[g.name[rows]]
    graphed = np.isin(g.correlation[rows], graph_corr) if len(graph_corr) else np.zeros(len(rows), dtype=bool)
    ts = scope.launch_ts[rows]
    known = ~np.isnan(ts)
    in_compiled = np.zeros(len(rows), dtype=bool)
    if len(spans):
        in_compiled[known] = spans.contains(ts[known])
    eager = ~triton & ~graphed & ~in_compiled
    pointwise = np.array([is_elementwise(n) for n in g.names], dtype=bool)[g.name[rows]]
    return CompiledWork(regions_per_step=regions / per, graphs_per_step=graphs / per,
                        graph_launches_per_step=launches / per, graphed_share=float(graphed.mean()),
                        triton_share=float(triton.mean()), eager_kernels_per_step=int(eager.sum()) / per,
                        eager_elementwise=float((eager & pointwise).mean()))
