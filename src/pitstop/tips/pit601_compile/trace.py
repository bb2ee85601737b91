"""PIT601's trace face: a launch-bound step, and what already runs compiled or graphed."""

from __future__ import annotations

from pitstop.trace.check import TraceCheck, ms, pct

__all__ = ["LaunchBoundTrace"]


class LaunchBoundTrace(TraceCheck, tip="PIT601"):
    looks_at = "many short kernels and the GPU idle between their launches (and what already runs compiled or graphed)"
    impact_basis = "idle"

    def check(self, rank, th):
        la, idle, c = rank.launches, rank.idle, rank.compiled
        if la is None or idle is None or la.short_kernels < th.short_kernels or idle.launch < th.launch_idle_share:
            return
        compiled = c is not None and (c.graph_launches_per_step > 0 or c.regions_per_step > 0 or c.triton_share > 0)
        if la.kernels_per_step < th.launch_min_kernels and not compiled:
            # few eager kernels: the idle is a few launch calls' latency; a compiled step has few
            # because compiling fused them, and its idle is the host around them (H200, 2026-11-28:
            # 37 and 40 kernels per step, 97% and 95% short, the GPU idle 67% between launches)
            return
        title, more, fix = "launch-bound: many short kernels", "", (
            "replay the step as CUDA graphs: torch.compile(model, mode=\"reduce-overhead\") (it also fuses kernels), "
            "or torch.cuda.graphs by hand; or larger batches")
        if c is not None and c.graph_launches_per_step > 0:  # graphed already: what is left is outside the graphs
            title, more, fix = "launch-bound between the CUDA graphs", (
                f"; the step already replays CUDA graphs ({c.graph_launches_per_step:.0f} launches per step, "
                f"{pct(c.graphed_share)} of its kernels): the idle is around them, where {c.eager_kernels_per_step:.0f} "
                "kernels per step still launch one by one"), (
                "capture what still runs outside the graphs: the optimizer step (fused=True, or compile it too), the "
                "loss, and the Python between graphs (a graph break splits a graph: PIT608); or larger batches")
        elif c is not None and (c.regions_per_step > 0 or c.triton_share > 0):  # compiled, not graphed
            title, more, fix = "launch-bound: compiled, but launched kernel by kernel", (
                f"; the step already runs compiled code ({c.regions_per_step:.0f} compiled regions per step) without "
                f"CUDA graphs, and {c.eager_kernels_per_step:.0f} kernels per step run outside it"), (
                "mode=\"reduce-overhead\" on the torch.compile call you have replays the compiled code as CUDA graphs; "
                "the kernels outside it still launch one by one (the optimizer: fused=True)")
        yield self.finding(
            th, rank, title=title, impact=idle.launch, fix=fix,
            evidence=(f"{la.kernels_per_step:.0f} kernels per step, {pct(la.short_kernels)} shorter than "
                      f"{la.short_threshold_us:.0f} us (median {la.median_kernel_us:.1f} us); the GPU idled "
                      f"{pct(idle.launch)} of the step while the host dispatched and launched them{more}"))
