"""PIT203 sync-calls-in-loop: torch.cuda.synchronize()/empty_cache() every training step."""

from __future__ import annotations

from pitstop.catalog import Tip


class SyncCallsInLoop(Tip):
    code = "PIT203"
    slug = "sync-calls-in-loop"
    title = "torch.cuda.synchronize() / torch.cuda.empty_cache() called every training step"
    faces = "LD"
    seeds = ("000",)
    truth = (
        "Seed 000 is wrong about `torch.cuda.empty_cache()`: it does not clear tensors (the "
        "memory of a tensor that is no longer referenced already goes back to PyTorch's "
        "cache and is reused), and calling it \"before sending anything to the GPU\" achieves "
        "nothing. It only hands unused cached blocks back to the driver; the docs say it does "
        "not increase the memory available to PyTorch. In a loop it only slows the caching "
        "allocator down; it frees nothing that PyTorch would not reuse. "
        "`torch.cuda.synchronize()` is for timing; every step it removes the CPU/GPU overlap."
    )

    what = """
        Flags `torch.cuda.empty_cache()` and `torch.cuda.synchronize()` inside a training loop
        (a `for`/`while` whose body calls `.backward(...)` or an optimizer's `.step()`), unless
        they sit under an interval guard: an `if` whose test contains `%`, such as
        `if step % 100 == 0:`. Reported at the call; no autofix. While training runs, the
        doctor counts these calls per step and measures the time the step spends in them.
    """
    why = """
        `synchronize()` blocks the CPU until every queued kernel has finished: the GPU then
        idles while the CPU queues the next step's work, on every step. `empty_cache()`
        returns the allocator's free blocks to the driver; the next step needs the same memory
        and must get it from the driver again. PyTorch's caching allocator exists to avoid
        exactly that: it frees memory without device synchronizations and reuses blocks
        without asking the driver.
    """
    example = """
        ```python
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.cuda.synchronize()   # waits for the GPU every step
            torch.cuda.empty_cache()   # hands back memory the next step re-allocates
        ```
    """
    use_instead = """
        ```python
        for step, (x, y) in enumerate(loader):
            ...                        # forward, backward, step: no sync calls
            if step % 100 == 0:        # time (or log) every N steps only
                torch.cuda.synchronize()
                print(step, time.perf_counter() - t0)
        ```
        To watch memory, read `torch.cuda.memory_allocated()` / `max_memory_allocated()`
        (PIT405) instead of emptying the cache. Against fragmentation, try the allocator's
        `expandable_segments:True` setting (environment variable `PYTORCH_ALLOC_CONF`, formerly
        `PYTORCH_CUDA_ALLOC_CONF`; see the CUDA semantics notes on memory management).
    """
    when_not = """
        Under an interval guard the cost is paid rarely, and the lint does not flag it.
        `synchronize()` is needed to time GPU work with a host clock (CUDA events with
        `elapsed_time` are the alternative) and before reading the result of a
        `non_blocking` device-to-host copy (PIT103). `empty_cache()` is useful once, not per step: when memory must go to
        something other than PyTorch's allocator (another process on the same GPU, a library
        with its own allocator), and, per the docs, it may reduce fragmentation in some cases.
    """
    references = (
        "PyTorch docs, torch.cuda.empty_cache: https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html",
        "PyTorch docs, CUDA semantics — Memory management: https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
        "PyTorch docs, torch.cuda.synchronize: https://pytorch.org/docs/stable/generated/torch.cuda.synchronize.html",
        "PyTorch docs, CUDA semantics — Asynchronous execution (timing with CUDA events): https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
        "Seed 000 (Cache Clearing And Memory Management; empty_cache \"before sending anything to the GPU\")",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule

_CALLS = frozenset({"torch.cuda.empty_cache", "torch.cuda.synchronize", "torch.cuda.memory.empty_cache"})


class SyncCallsInLoopRule(LintRule, tip="PIT203"):
    message = "called every training step: synchronize() stalls the CPU, empty_cache() defeats the caching allocator"
    in_tests = False

    def visit_Call(self, node):
        ctx = self.ctx
        q = ctx.call_name(node)
        site, fn = ctx.site(), ctx.current_function()
        if q in _CALLS:
            self.report(node, f"{q}() every training step: " + (
                "it stalls the CPU until the device is idle" if q.endswith("synchronize")
                else "it slows the caching allocator and frees nothing PyTorch would not reuse"),
                        when=lambda: ctx.runs_every_step(site, fn))
        elif q is None and (ctx.loop() is not None or fn is not None):
            found = ctx.sync_chain(node)  # a helper that synchronizes (a Timer's start/stop), any depth
            if found is not None and found[2] == "synchronize":
                chain, line, _, local = found
                caller = fn.name.value if fn is not None else "training loop"
                self.report(node, f"{' -> '.join([caller, *chain])}: torch.cuda.synchronize() every training step "
                                  f"(line {line}{'' if local else ' of its file'}): it stalls the CPU until the "
                                  "device is idle; time with CUDA events, or synchronize only when logging",
                            when=lambda: ctx.runs_every_step(site, fn), pattern="chain")


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, ms  # noqa: E402


class SyncCallsCheck(Check, tip="PIT203"):
    looks_at = "torch.cuda.synchronize() / torch.cuda.empty_cache() calls per step"
    #: the cost is the GPU idle after the device-wide sync (the profiled steps measure it)
    gpu_role = "trace"

    def check(self, obs, th):
        n = max(obs.steps_observed, 1)
        sites = [s for s in obs.cuda_calls if s.kind in ("cuda.synchronize", "cuda.empty_cache")
                 and s.steps_with_calls / n >= th.per_step_fraction]
        if not sites:
            return
        seconds = sum(s.seconds for s in sites) / n
        share = seconds / obs.mean_step if obs.mean_step and obs.on_cuda else None
        listing = ", ".join(f"{s.kind}() at {s.where}" for s in sites[:4])
        note = (f"{ms(seconds)} per step spent in them" if obs.on_cuda
                else "no effect on this CPU run; on a GPU they stall the host (synchronize) or the caching allocator (empty_cache) every step")
        yield self.finding(
            th, title="CUDA synchronize / empty_cache called every step",
            evidence=f"{sum(s.calls for s in sites) / n:.1f} calls per step: {listing}; {note}.",
            fix="remove them from the loop; synchronize only around a timed region, never empty_cache per step",
            share=share, seconds=seconds if obs.on_cuda else None, severity=None if obs.on_cuda else "low",
            where=[s.where for s in sites])


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


_DEVICE_SYNC = ("cudaDeviceSynchronize", "hipDeviceSynchronize")


class SynchronizeCallTrace(TraceCheck, tip="PIT203"):
    looks_at = "cudaDeviceSynchronize / hipDeviceSynchronize calls inside the profiler steps"
    impact_basis = "idle"  # GPU idle time: the doctor re-bases it on its observed step

    def check(self, rank, th):
        if not rank.steps or rank.idle is None:
            return
        sites = [s for s in rank.syncs.sites if s.call in _DEVICE_SYNC]
        n = sum(s.count for s in sites)
        if n < rank.steps:
            return
        share = rank.idle.sync * n / max(rank.syncs.count, 1)
        yield self.finding(
            th, rank, title="torch.cuda.synchronize() every step", impact=share,
            evidence=(f"{n / rank.steps:.1f} device-wide syncs per step ({sites[0].call} <- {sites[0].cause}); the "
                      f"GPU idled {pct(share)} of the step after syncs"),
            fix="drop torch.cuda.synchronize() from the loop (time with CUDA events or the profiler instead)")
