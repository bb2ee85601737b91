"""PIT905 profile: measure where the step time and memory go before optimizing."""

from __future__ import annotations

from pitstop.catalog import Tip


class Profile(Tip):
    code = "PIT905"
    slug = "profile"
    title = "Profile before optimizing: step-time breakdown, trace and memory snapshot"
    faces = "DE"
    seeds = ("002",)
    truth = (
        "Seed 002 points to PyTorch Lightning's built-in profiler, the PyTorch profiler recipe "
        "and two posts on memory snapshots and traces. No framework is needed: `torch.profiler` "
        "records CPU and CUDA activity and exports a trace that Chrome's trace viewer and "
        "Perfetto open, and `torch.cuda.memory._record_memory_history` with "
        "`torch.cuda.memory._dump_snapshot` writes the memory snapshot those posts describe "
        "(underscore-prefixed, but documented in PyTorch's guide to CUDA memory usage). In "
        "pitstop, `pitstop doctor --trace` collects them for your run."
    )

    what = """
        At run time the doctor times the training steps and splits them into phases (waiting
        for data, forward, backward, optimizer step), so the tips it prints are ranked by what
        actually costs time in your run. With a trace requested it also writes a profiler trace
        (Chrome/Perfetto format) and, on CUDA, a memory snapshot. There is no lint rule: where
        the time goes cannot be read from the source.
    """
    why = """
        A speed-up only acts on the part of the step it touches: faster matmuls do nothing for
        a step that mostly waits for the DataLoader. Guessing also misleads because CUDA is
        asynchronous: a Python timer around GPU code measures how long it took to queue the
        kernels, not to run them, unless the device is synchronized before reading the clock.
        The profiler records both the host and the device timelines, so it shows launches,
        kernels, copies and the gaps where the GPU waits for Python.
    """
    example = """
        ```python
        t0 = time.time()
        loss = loss_fn(model(x), y)          # CUDA kernels are only queued here
        loss.backward()
        print("step", time.time() - t0)      # launch time, not GPU time
        ```
    """
    use_instead = """
        ```python
        from torch.profiler import ProfilerActivity, profile, record_function, schedule

        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=1, warmup=1, active=3, repeat=1),   # skip warm-up steps
            on_trace_ready=lambda p: p.export_chrome_trace("trace.json"),  # ui.perfetto.dev
        ) as prof:
            for step, (x, y) in enumerate(loader):
                with record_function("forward"):
                    loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                prof.step()
                if step == 5:
                    break
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
        ```
        CUDA memory over time (drop the file onto https://pytorch.org/memory_viz):
        ```python
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        ...                                                  # run a few steps
        torch.cuda.memory._dump_snapshot("snapshot.pickle")
        torch.cuda.memory._record_memory_history(enabled=None)   # stop recording
        ```
        For a micro-benchmark of one function, `torch.utils.benchmark.Timer` handles warm-up
        and CUDA synchronization.
    """
    when_not = """
        Profiling has overhead, more with `record_shapes`, `profile_memory` or `with_stack`:
        profiled steps run slower, so use the trace to see *where* time goes, not to read the
        absolute step time. Keep the active window to a few steps, since long traces get large
        and slow to open. The first steps include one-time costs (cuDNN benchmarking,
        `torch.compile`, allocator warm-up): skip them with `wait`/`warmup`. The memory
        snapshot is CUDA-only.
    """
    references = (
        "PyTorch docs, torch.profiler: https://pytorch.org/docs/stable/profiler.html",
        "PyTorch recipe, Profiling your PyTorch module: https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html",
        "PyTorch docs, Understanding CUDA Memory Usage (memory snapshots): https://pytorch.org/docs/stable/torch_cuda_memory.html",
        "PyTorch recipe, PyTorch Benchmark (torch.utils.benchmark): https://pytorch.org/tutorials/recipes/recipes/benchmark.html",
        "Zachary DeVito, Debugging PyTorch memory use with snapshots: https://zdevito.github.io/2022/08/16/memory-snapshots.html",
        "Seed 002 (Profile your code; Debugging)",
    )
    engine = "pitstop.engine.ProfileSteps(trace) is a fit callback that runs torch.profiler over a window of whole optimizer steps (wait, warmup, active) and writes a Chrome/Perfetto trace, plus a CUDA memory snapshot on CUDA."


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402
from pitstop.doctor.analysis.records import Flops  # noqa: E402


class ProfileCheck(Check, tip="PIT905"):
    looks_at = "step time not explained by data/host/forward/backward/optimizer/eval; GPU utilisation (MFU)"
    #: on a GPU the profiled steps explain the step: the trace's unexplained idle decides
    gpu_role = "trace"
    #: lost time without a change to make: below every cause (pitstop.severity.settle)
    summary = True

    def check(self, obs, th):
        other = obs.share("other")
        if other > th.unexplained_share:
            sites = [s for s in obs.other_sites if s.share >= 0.1][:3]
            lines = ", ".join(f"{s.where} ({pct(s.share)} of samples)" for s in sites)
            yield self.finding(
                th, title="A large part of the step is outside the measured phases",
                evidence=f"{pct(other)} of the step is not data wait, host work before the forward, forward, "
                         "backward, optimizer or evaluation (logging, checkpointing, Python work between the phases)"
                         + (f"; sampled stacks put the main thread at {lines}" if lines else "") + ".",
                fix="look at those lines, or at a trace: pitstop doctor SCRIPT --trace DIR (open it in Perfetto)",
                share=other, severity="low", where=[s.where for s in sites])
        flops = obs.flops or Flops()
        mfu = flops.mfu
        if mfu is not None and mfu < th.utilisation:
            yield self.finding(
                th, title="Low model FLOP utilisation",
                evidence=f"MFU {pct(mfu)} ({flops.achieved_per_s / 1e12:.1f} TFLOP/s achieved vs "
                         f"{flops.peak_per_s / 1e12:.0f} peak, {flops.peak_source}).",
                fix="see the breakdown: data wait (PIT101), precision (PIT301), syncs (PIT201); then a trace (--trace DIR)",
                severity="low")


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class UnexplainedIdleTrace(TraceCheck, tip="PIT905"):
    looks_at = "GPU idle while the host ran its own code (no DataLoader, sync or launch to blame)"
    impact_basis = "idle"  # GPU idle time: the doctor re-bases it on its observed step
    summary = True

    def check(self, rank, th):
        if rank.idle is None or rank.idle.host < th.unexplained_idle:
            return
        yield self.finding(
            th, rank, title="the GPU waits for host code", impact=rank.idle.host,
            evidence=(f"the GPU idled {pct(rank.idle.host)} of the "
                      f"{'step' if rank.steps else 'GPU span'} while the host ran Python or operator code "
                      "that no other finding explains"),
            fix="profile the host side (pitstop doctor, or the profiler with with_stack=True) and move that work "
                "off the critical path")
