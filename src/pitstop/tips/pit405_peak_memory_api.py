"""PIT405 peak-memory-api: measure memory per phase with the current peak-statistics API."""

from __future__ import annotations

from pitstop.catalog import Tip


class PeakMemoryApi(Tip):
    code = "PIT405"
    slug = "peak-memory-api"
    title = "Measure memory per phase with memory_allocated / max_memory_allocated / reset_peak_memory_stats"
    faces = "LDE"
    seeds = ("000", "001")
    truth = (
        "Seed 000's `torch.cuda.reset_max_memory_allocated()` is deprecated, like "
        "`reset_max_memory_cached()`: in torch 2.13 both emit a FutureWarning and call "
        "`torch.cuda.reset_peak_memory_stats()`, which resets all peak statistics, not just one "
        "counter. Seed 001's `torch.cuda.memory_allocated()` counts only memory occupied by "
        "tensors: it is usually less than nvidia-smi shows, which also includes the caching "
        "allocator's reserve (`memory_reserved()`) and the CUDA context. torch 2.13 also has "
        "device-agnostic `torch.accelerator.memory_allocated / max_memory_allocated / "
        "reset_peak_memory_stats`."
    )

    what = """
        Flags calls of `torch.cuda.reset_max_memory_allocated` and
        `torch.cuda.reset_max_memory_cached`, with a safe autofix to
        `torch.cuda.reset_peak_memory_stats` (what the old functions call anyway). At run
        time on CUDA the doctor measures the allocator's peak separately for the forward
        pass, the backward pass and the optimizer step, resetting the peak between phases,
        so a memory problem is attributed to the phase that causes it.
    """
    why = """
        One number at the end of a step (or nvidia-smi) does not say what to change. The
        forward pass's peak grows with the saved activations (PIT401), the backward adds the
        gradients, and the first optimizer step adds the optimizer state (PIT402).
        `max_memory_allocated()` reports the highest tensor memory since the last
        `reset_peak_memory_stats()`, so resetting at each phase boundary gives a peak per
        phase; `memory_allocated()` gives what is still held when a phase ends.
    """
    example = """
        ```python
        torch.cuda.reset_max_memory_allocated()      # deprecated
        loss = loss_fn(model(x), y)
        loss.backward()
        print(torch.cuda.max_memory_allocated())     # one peak for everything
        ```
    """
    use_instead = """
        ```python
        def peak_since_reset():
            return torch.cuda.max_memory_allocated() / 2**20   # MiB

        torch.cuda.reset_peak_memory_stats()
        loss = loss_fn(model(x), y)
        fwd = peak_since_reset()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        bwd = peak_since_reset()
        torch.cuda.reset_peak_memory_stats()
        optimizer.step()
        opt = peak_since_reset()
        held = torch.cuda.memory_allocated() / 2**20
        ```
        For a timeline of every allocation, take a memory snapshot (PIT905).
    """
    when_not = """
        Measuring makes nothing faster; it tells you where memory goes. The counters exist
        for CUDA (and other accelerators through `torch.accelerator`); on the CPU there is no
        equivalent in torch 2.13 (`torch.cpu` has no memory counters; checked), and process
        RSS is only a rough proxy. `memory_allocated` leaves out the allocator's cache and
        the CUDA context, so it will not match nvidia-smi: look at `memory_reserved()` for
        the cache.
    """
    references = (
        "PyTorch docs, torch.cuda.reset_peak_memory_stats: https://pytorch.org/docs/stable/generated/torch.cuda.reset_peak_memory_stats.html",
        "PyTorch docs, torch.cuda.max_memory_allocated: https://pytorch.org/docs/stable/generated/torch.cuda.max_memory_allocated.html",
        "PyTorch docs, CUDA semantics — Memory management: https://pytorch.org/docs/stable/notes/cuda.html",
        "PyTorch docs, Understanding CUDA Memory Usage (memory snapshots): https://pytorch.org/docs/stable/torch_cuda_memory.html",
        "Seed 000 (reset_max_memory_allocated), seed 001 (memory_allocated after each phase)",
    )
    engine = "pitstop.engine.PhaseMemory(steps) is a fit callback that hooks the model's forward and the optimizer step and records, for the chosen steps, the peak memory of the forward, backward and optimizer step and what is held after the step: reset_peak_memory_stats/max_memory_allocated on CUDA, torch's MemTracker on CPU."


# --- lint face ---
from pitstop.lint.rule import SAFE, LintRule, cst

_OLD = frozenset({"torch.cuda.reset_max_memory_allocated", "torch.cuda.reset_max_memory_cached",
                  "torch.cuda.memory.reset_max_memory_allocated", "torch.cuda.memory.reset_max_memory_cached"})


class PeakMemoryApiRule(LintRule, tip="PIT405"):
    concern = "deprecation"  # never hidden as one-time: it breaks when torch removes it, however often it runs
    message = "deprecated memory API; use torch.cuda.reset_peak_memory_stats()"
    fix = SAFE

    def visit_Call(self, node):
        q = self.ctx.call_name(node)
        if q not in _OLD:
            return
        fix = None
        if isinstance(node.func, cst.Attribute):
            fix = self.ctx.fix(SAFE, "Use reset_peak_memory_stats", (node.func.attr, "reset_peak_memory_stats"))
        self.report(node, f"{q.rsplit('.', 1)[1]}() is deprecated; use torch.cuda.reset_peak_memory_stats()", fix=fix)


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, mib, pct  # noqa: E402
from pitstop.doctor.analysis.records import MemoryRecord  # noqa: E402


class PeakMemoryCheck(Check, tip="PIT405"):
    looks_at = "peak memory against device capacity; deprecated peak-reset calls"

    def check(self, obs, th):
        m = obs.memory or MemoryRecord()
        peak, cap = m.peak, m.capacity
        if peak and cap and peak / cap > th.memory_share:
            sizes = (("params", m.params), ("grads", m.grads), ("optimizer_state", m.optimizer_state),
                     ("activations", m.activations))
            parts = ", ".join(f"{k} {mib(v)}" for k, v in sizes if v)
            phases = m.phase_peaks
            by_phase = ("; peak per phase: " + ", ".join(f"{k} {mib(v)}" for k, v in phases.items())) if phases else ""
            yield self.finding(
                th, title="Peak memory is near the device's capacity",
                evidence=f"peak {mib(peak)} ({m.peak_source}) is {pct(peak / cap)} of {mib(cap)}: {parts}{by_phase}.",
                fix="attack the largest part: activations (PIT401, smaller batch + accumulation PIT406), "
                    "optimizer state (PIT402), precision (PIT301)",
                kind="memory", share=peak / cap, nbytes=peak, severity="high")
        deprecated = [s for s in obs.cuda_calls if s.kind == "cuda.reset_max_memory_allocated"]
        if deprecated:
            yield self.finding(
                th, title="Deprecated torch.cuda.reset_max_memory_allocated()",
                evidence=f"called {sum(s.calls for s in deprecated)} times during the observed steps.",
                fix="torch.cuda.reset_peak_memory_stats()", kind="correctness", severity="low",
                where=[s.where for s in deprecated])


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402


class FragmentationFix(MemoryFix, tip="PIT405"):
    """When the CUDA allocator failed with memory reserved but in pieces too small for the
    request (its free pieces of split blocks at the failure), expandable segments let it grow
    a segment instead: those bytes come back. Read from the allocator's own statistics."""

    title = "expandable segments (allocator fragmentation)"

    def estimate(self, basis, obs, *, limit, need, oom):
        a = oom.allocator if oom is not None else None
        if a is None or not a.inactive_split or not a.cached:
            return
        lost = min(a.inactive_split, a.cached)
        if oom.tried and a.largest_free is not None and a.largest_free >= oom.tried:
            return  # a free block was large enough: fragmentation was not the cause
        yield FixEstimate(
            code=self.tip, title="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", fixed_saved=lost,
            how="measured",
            basis=(f"the allocator held {mib(a.cached)} reserved but unallocated, {mib(a.inactive_split)} of it in "
                   f"free pieces of split blocks" + (f" (largest free block {mib(a.largest_free)})"
                                                     if a.largest_free is not None else "")),
            time_cost=0.0, cost_basis="an allocator setting: no time cost expected",
            fix="set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment before the script starts")
