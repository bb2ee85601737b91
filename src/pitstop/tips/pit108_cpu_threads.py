"""PIT108 cpu-threads: more runnable threads than cores the process can use."""

from __future__ import annotations

from pitstop.catalog import Tip


class CpuThreadsTip(Tip):
    code = "PIT108"
    slug = "cpu-threads"
    title = "More runnable threads than cores: every parallel region waits for a core"
    faces = "DK"
    seeds = ()
    truth = ("measure the wait (CPU time vs wall per thread); the fix is torch.set_num_threads / "
             "OMP_NUM_THREADS sized to the cores left, which torchrun sets to 1 per rank by default")

    what = """
        Finds a training process whose threads wait for a core. PyTorch runs CPU operators on a
        pool of intra-op threads (`torch.get_num_threads()`, by default one per core it sees);
        when that pool, times the processes on the machine (torchrun ranks, DataLoader workers
        doing CPU work), exceeds the cores the process may use, or other processes already hold
        those cores, threads are runnable but not running. The doctor measures it during the
        observed steps: the CPU time the process's threads got against the wall time they were
        runnable (`/proc`'s scheduler statistics), and the machine's load beside it. DataLoader
        workers count by the CPU they used, not by their number. The finding says how much of
        the step was spent waiting for a core and the thread count that fits.
    """
    why = """
        An intra-op parallel region (a GEMM, a convolution, an elementwise kernel over a large
        tensor) splits its work into one chunk per thread and ends at a barrier: the region
        lasts as long as its slowest chunk. When one thread of the pool is descheduled because
        another process holds its core, every other thread of the pool waits at the barrier
        (spinning, by OpenMP's default, which burns the very CPU the late thread needs). With
        more threads than free cores the step can be many times slower than with fewer
        threads; the cure is not more threads but as many as there are free cores. Measured on
        the 2-core AMD EPYC this project runs on, beside other processes (load average ~10):
        forward+backward of torchdiffeq's ODE demo network (Linear(2, 50), Tanh, Linear(50, 2),
        20 samples) took 24 ms with torch's 2 threads and 0.6 ms with 1 (19 ms and 0.56 ms in a
        second pair), in separate processes run back to back.
    """
    example = """
        ```python
        # two ranks on a 2-core machine, each with torch's default of 2 intra-op threads,
        # beside a data-preprocessing job that keeps one core busy
        import torch
        model = build_model()
        for x, y in loader:                    # each parallel region waits for a core
            loss = model(x).loss
            loss.backward()
            optimizer.step()
        ```
    """
    use_instead = """
        ```python
        import os, torch
        free_cores = len(os.sched_getaffinity(0))          # minus what other processes hold
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(max(1, free_cores // ranks))
        ```
        Or set `OMP_NUM_THREADS` before the process starts (`torchrun` sets it to 1 per rank
        when it launches more than one process and it is unset). `pitstop doctor` measures the
        wait and names the thread count that fits; `pitstop tune` measures the step at that
        count side by side with the default.
    """
    when_not = """
        On a machine whose cores are free and whose threads equal its cores, fewer threads only
        slow the CPU operators down. A GPU training loop spends little CPU time in intra-op
        regions, so its thread count rarely matters unless the data pipeline runs in the same
        process. DataLoader workers that sleep on I/O hold no core.
    """
    references = (
        "PyTorch docs, CPU threading and TorchScript inference (intra-op thread pool, OMP_NUM_THREADS): https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
        "PyTorch docs, torch.set_num_threads: https://pytorch.org/docs/stable/generated/torch.set_num_threads.html",
        "PyTorch docs, torchrun (sets OMP_NUM_THREADS=1 per process by default when several are launched): https://pytorch.org/docs/stable/elastic/run.html",
        "Beyond the seeds; seed 002's \"workers = number of CPU cores\" is its other half (PIT101)",
    )


def threads_that_fit(cores: int, others: float, workers: float = 0.0, processes: int = 1) -> int:
    """Intra-op threads per process that fit the cores left: the usable ``cores`` less what
    ``others`` (other processes' cores, measured) and ``workers`` (the DataLoader workers' cores,
    by their CPU use) keep busy, shared by ``processes``, rounded, at least one."""
    free = cores - others - workers
    return max(1, int(free / max(1, processes) + 0.5))


def _fit(obs):
    """(threads, fitting threads, processes) for a CPU run whose waits were measured, else None."""
    cpu, threads, cores = obs.cpu, obs.settings.num_threads, obs.usable_cores
    if cpu is None or cpu.wait_share is None or not threads or not cores:
        return None
    procs = obs.settings.world_size or 1
    return threads, threads_that_fit(cores, cpu.others_cores or 0.0, cpu.workers_cores or 0.0, procs), procs


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, Thresholds, ms, pct  # noqa: E402
from pitstop.doctor.analysis.probe import ESTIMATE_NOTE, Probe, gain_text, probe_gain  # noqa: E402


class CpuThreadsCheck(Check, tip="PIT108"):
    looks_at = ("per-thread CPU time vs the wait for a core during the observed steps (/proc schedstat), threads x "
                "processes against the usable cores, the CPU other processes used meanwhile")

    def skip_reason(self, obs):
        if obs.on_cuda:
            return "training runs on CUDA: its intra-op threads run little of the step"
        if obs.cpu is None or obs.cpu.wait_share is None:
            return "no per-thread scheduler statistics (Linux /proc) were read"
        return None

    def role(self, obs):
        return "live"

    def check(self, obs, th):
        found = _fit(obs)
        if found is None:
            return
        threads, fit, procs = found
        cpu, cores = obs.cpu, obs.usable_cores
        others, workers = cpu.others_cores or 0.0, cpu.workers_cores or 0.0
        over = threads * procs + workers > cores
        crowded = others >= th.busy_others_share * cores
        busy = cpu.threads_busy or 0
        if cpu.wait_share < th.core_wait_share or fit >= threads or busy <= fit or not (over or crowded):
            return  # no wait, the threads fit, the pool does no work (tiny ops run on one thread), or no cause
        probe = obs.probe(ThreadsProbe.key())
        g = probe_gain(probe)
        wait = (f"the {cpu.threads_busy} busy threads of the run each waited for a core {pct(cpu.wait_share)} of the "
                f"step on average ({ms(cpu.thread_wait_per_step or 0.0)} per step in all, step {ms(obs.mean_step)})")
        demand = (f"torch runs {threads} intra-op threads" + (f" in each of {procs} processes" if procs > 1 else "")
                  + f" on {cores} usable cores" + (f", its DataLoader workers kept {workers:.1f} cores busy" if workers >= 0.05 else "")
                  + (f", and other processes kept {others:.1f} cores busy meanwhile" if others >= 0.05 else ""))
        severity = None
        if g is not None:
            if g.low < th.probe_speedup:
                return  # the side-by-side step says fewer threads do not help here
            share = min(1.0, (obs.compute_share + obs.share("optimizer")) * (1 - 1 / g.low))
            evidence = (f"{wait}; {demand}; probe: {probe.what} is {gain_text(g)} faster at {fit} thread"
                        f"{'s' if fit > 1 else ''}; {ESTIMATE_NOTE}.")
        else:
            # the measured wait: the share of the step a thread spent runnable, not running. An upper
            # bound of what fewer threads save (other processes keep their cores): medium at most
            share = cpu.wait_share
            severity = "medium" if share >= th.medium_share else "low"
            why = f"; probe: {probe.skipped}" if probe is not None and probe.skipped else ""
            evidence = (f"{wait}; {demand}; impact: the measured wait, an upper bound (other processes keep their "
                        f"cores), so at most medium until the step at {fit} thread{'s' if fit > 1 else ''} is measured"
                        f"{why}.")
        yield self.finding(
            th, title=f"Threads wait for a core: {threads} intra-op threads where {fit} fit{'' if fit > 1 else 's'}",
            evidence=evidence,
            fix=(f"torch.set_num_threads({fit}) at the start of the script (or OMP_NUM_THREADS={fit} in its "
                 f"environment), or free the cores; `pitstop tune --only PIT108` measures it on the real loop"),
            share=share, seconds=share * obs.mean_step, severity=severity)


# --- doctor probe face ---
class ThreadsProbe(Probe, tip="PIT108"):
    """Forward+backward of a copy of the model at torch's thread count vs the count that fits
    the cores left (set around each call), side by side on wall time, on the machine as it is."""

    name = "threads"

    def skip_reason(self, obs):
        if obs.model is None:
            return "no model with parameters ran a training forward"
        if obs.on_cuda:
            return "training runs on CUDA"
        found = _fit(obs)
        if found is None:
            return "no per-thread scheduler statistics (Linux /proc) were read"
        threads, fit, _ = found
        if fit >= threads:
            return f"{threads} intra-op thread{'s' if threads > 1 else ''} fit the cores left"
        if (obs.cpu.threads_busy or 0) <= fit:
            return f"only {obs.cpu.threads_busy or 0} thread(s) did work: the intra-op pool is idle"
        if obs.cpu.wait_share < Thresholds().core_wait_share:
            return f"the threads waited for a core only {obs.cpu.wait_share:.0%} of the step"
        return None

    def run(self, ctx):
        import torch

        threads, fit, _ = _fit(ctx.obs)
        model, batch = ctx.model_copy(), ctx.batch()
        step = ctx.fwd_bwd(model, batch)

        def at(k):
            def run():
                torch.set_num_threads(k)
                try:
                    step()
                finally:
                    torch.set_num_threads(threads)
            run.cost = getattr(step, "cost", None)  # what the observed steps say a call takes
            return run
        base = f"{threads} threads"
        yield self.name, ctx.compare(what=f"{ctx.describe(model, batch)}, at {threads} vs {fit} intra-op threads",
                                     baseline=base, variants={base: at(threads), f"{fit} threads": at(fit)},
                                     keep_threads=True, clock="wall")


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class ThreadsKnob(Knob, tip="PIT108"):
    """Fewer intra-op threads (``torch.set_num_threads``, set in the child before the script):
    half of torch's count and one thread; on a machine whose cores are taken by other work (or
    by more threads than cores) a step with fewer threads waits less for a core."""

    name = "threads"
    title = "intra-op threads (torch.set_num_threads)"
    order = 5

    def applies(self, ctx):
        n = ctx.num_threads or ctx.cpu_count
        if ctx.on_cuda:
            return Applicability(False, "training runs on CUDA: its intra-op threads run little of the step")
        return Applicability(n > 1, n <= 1 and "torch already runs one intra-op thread")

    def values(self, ctx):
        n = ctx.num_threads or ctx.cpu_count
        return sorted({max(1, n // 2), 1} - {n}, reverse=True)

    def label(self, value):
        return f"threads={value}"

    def recipe_fields(self, value, ctx):
        return {"threads": value}

    def apply_in_child(self, value, **options):
        import torch

        torch.set_num_threads(value)

    def snippet(self, value, ctx):
        return (f"torch.set_num_threads({value})  # at the start, before any tensor work "
                f"(or OMP_NUM_THREADS={value} in the environment)\n")
