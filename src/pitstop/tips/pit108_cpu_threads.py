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
        threads; the cure is not more threads but as many as there are free cores.
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
