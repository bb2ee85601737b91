"""PIT607 pointwise-fusion: chains of pointwise ops cost one memory pass per op unless fused."""

from __future__ import annotations

from pitstop.catalog import Tip


class PointwiseFusion(Tip):
    code = "PIT607"
    slug = "pointwise-fusion"
    title = "Chains of pointwise ops read and write memory once per op; fusion does it once"
    faces = "B"
    seeds = ("002",)
    truth = (
        "Seed 002 files this under \"Use inplace operations\", but its text is about operator "
        "fusion, and writing `x.cos().cos()` on one line fuses nothing in eager mode: it still "
        "runs two kernels and materializes the intermediate. Fusion takes a compiler "
        "(`torch.compile`, PIT601) or a built-in fused op. The seed's count is right (4 passes "
        "over memory unfused, 2 fused), but its \"2x\" is only the bound for a purely "
        "memory-bound op. Measured here (one thread, CPU time, 2-core Xeon): `x.cos().cos()` on "
        "16M float32 values (64 MiB) took 70 ms eager and 39-40 ms compiled (1.7-1.8x, the same "
        "at 256 MiB), after 14-28 s of compilation. On this CPU much of the eager cost is "
        "allocating fresh memory: the same chain written into a preallocated buffer "
        "(`torch.cos(x, out=buf)`, twice) took 21-23 ms."
    )

    what = """
        Benchmark only: `pitstop bench PIT607` reproduces the seed's example on this machine,
        timing `x.cos().cos()` on a large tensor eagerly and under `torch.compile`, with the
        compile time reported apart. The lint and the doctor do not flag pointwise chains; the
        doctor's compile check (PIT601) covers models.
    """
    why = """
        A pointwise op does a few arithmetic operations per element, so its time is the memory
        traffic. Unfused, `x.cos().cos()` reads `x`, writes `x1`, reads `x1` and writes `x2`:
        four passes over the data, plus an allocation for `x1`. A fused kernel reads `x` once,
        applies both cosines in registers and writes `x2` once. Activation functions written out
        by hand, normalizations and optimizer updates are such chains.
    """
    example = """
        ```python
        def gelu_tanh(x):   # written out by hand: about 8 pointwise kernels, 8 intermediates
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

        y = x.cos().cos()   # still two kernels in eager mode
        ```
    """
    use_instead = """
        A built-in fused op, where one exists (no compilation needed):
        ```python
        y = torch.nn.functional.gelu(x, approximate="tanh")
        ```
        Otherwise let the compiler fuse the chain:
        ```python
        @torch.compile
        def f(x):
            return x.cos().cos()   # one generated kernel: read x, write the result
        ```
    """
    when_not = """
        When matmuls or convolutions dominate the step, the pointwise glue is a small share of it.
        On small tensors the per-call overhead dominates, and compiling a tiny workload made it
        slower here (PIT601). The compile time (14-28 s here for this two-op function, cold
        cache) only pays off over many calls. In-place ops (`x.cos_().cos_()`) are not fusion:
        they still make two passes, though they skip the allocation, and backward raises an
        error if they overwrote a tensor autograd saved.
    """
    references = (
        "Horace He, Making Deep Learning Go Brrrr From First Principles (the `x.cos().cos()` example): https://horace.io/brrr_intro.html",
        "PyTorch Performance Tuning Guide — Fuse operations: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "PyTorch docs, torch.compile: https://pytorch.org/docs/stable/generated/torch.compile.html",
        "Seed 002 (Use inplace operations: operator fusion of `x.cos().cos()`)",
    )


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402


class PointwiseFusionBench(Benchmark, tip="PIT607"):
    title = "x.cos().cos() on a large tensor: eager vs fused by torch.compile"
    compiles = True
    claim = Claim(
        seed="002",
        text="with operator fusion, we only need 2 global memory reads and writes! So operator fusion will "
             "speed it up by 2x",
        baseline="eager",
        candidate="compiled",
        ratio=2.0,
        ratio_of="median time eager / median time compiled",
        scope="any",  # "global memory" is CUDA's word, but the count (4 passes -> 2) holds for a CPU's DRAM too
    )

    def run(self, ctx):
        import torch

        n = ctx.size(tiny=1 << 16, quick=1 << 22, full=1 << 24)
        x = torch.randn(n, device=ctx.device)
        buf = torch.empty_like(x)

        def eager(t):
            return t.cos().cos()

        def eager_out():
            torch.cos(x, out=buf)
            return torch.cos(buf, out=buf)

        compiled, compile_time = ctx.compile(eager, lambda f: f(x))
        torch.testing.assert_close(compiled(x), eager(x))  # same numbers, or the speed means nothing
        measured = ctx.time({"eager": lambda: eager(x), "compiled": lambda: compiled(x),
                             "eager, out= buffer": eager_out})
        mib = x.numel() * x.element_size() / 2**20
        return Outcome(
            workload=f"x.cos().cos() on {n:,} float32 values ({mib:.0f} MiB) on {ctx.device}; compiled with "
                     f"torch.compile (Inductor), outputs checked equal to eager",
            measurements=[*measured, compile_time],
            comparisons=[Comparison("eager", "eager, out= buffer",
                                    "eager into a preallocated buffer (no fusion, no allocation) vs eager")],
            notes=["The seed's 2x is the bound for a purely memory-bound op (4 passes over memory -> 2); "
                   "compute per element and the allocation of the intermediate move the measured ratio."],
        )


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class PointwiseChainTrace(TraceCheck, tip="PIT607"):
    looks_at = "the share of kernels that are unfused elementwise ones, when the step is launch-bound"
    impact_basis = "idle"
    #: the same launch idle as PIT601's: one finding, fusing an option of it
    same_cost_as = "PIT601"

    def check(self, rank, th):
        la, idle = rank.launches, rank.idle
        if la is None or idle is None or idle.launch < th.launch_idle_share:
            return
        if la.kernels_per_step < th.launch_min_kernels:
            return
        c = rank.compiled
        compiled = c is not None and c.any
        # Triton kernels and graph-replayed ones are fusion's and graphs' output: only the eager ones are left
        share = c.eager_elementwise if compiled else la.elementwise
        if share < 0.3:
            return
        if compiled:
            evidence = (f"{pct(share)} of the {la.kernels_per_step:.0f} kernels per step are elementwise kernels that run "
                        "outside the compiled code (neither Triton nor graph-replayed); each reads and writes memory "
                        "once, and the GPU idles between their launches")
            fix = ("compile the code that still launches them (often the optimizer step: fused=True; or the loss "
                   "outside the compiled function)")
        else:
            evidence = (f"{pct(share)} of the {la.kernels_per_step:.0f} kernels per step are elementwise; each reads and "
                        "writes memory once, and the GPU idles between their launches")
            fix = "fuse them: torch.compile the function that holds the chain"
        yield self.finding(th, rank, title="chains of elementwise kernels", impact=idle.launch * share,
                           evidence=evidence, fix=fix)
