"""PIT101 dataloader-workers: load batches in worker processes, not in the training loop."""

from __future__ import annotations

from pitstop.catalog import Tip


class DataloaderWorkers(Tip):
    code = "PIT101"
    slug = "dataloader-workers"
    title = "Training DataLoader with num_workers=0 loads every batch in the training process"
    faces = "LDKEB"
    seeds = ("002", "003")
    truth = (
        "Seed 002's rule of thumb (workers = number of cores, or 4 per GPU) is only a start: "
        "measure, because on a machine with few cores the workers compete with the compute "
        "threads. `persistent_workers=True` avoids re-forking the workers every epoch."
    )

    what = """
        Flags a training `DataLoader` built without `num_workers` (the default is 0), with a literal
        `num_workers=0`, or with an argparse option of the same file whose default is 0
        (`num_workers=args.dataloader_num_workers`, `default=0`: the message names the option).
        Not training loaders, and not flagged: evaluation loaders (bound to, passed as, or built by
        a function named for validation/evaluation/test/prediction/inference/sampling/prompts, or
        by a function decorated `@torch.no_grad()`/`@torch.inference_mode()`, such as a feature
        extraction), an ordered pass (`shuffle=False` and no sampler, a `SequentialSampler`, or a
        sampler built with `shuffle=False`), one-off `next(iter(DataLoader(...)))`, unit tests; nor
        loaders over in-memory data (a `TensorDataset`, a list, a Dataset class whose `__getitem__`
        only indexes or draws small random tensors such as `torch.randint`, found in the file or a
        linted sibling file), over rows a Hugging Face `.map(...)` computed up front whose
        `collate_fn` only pads or stacks them, over items a Dataset class puts on the accelerator (a
        forked worker cannot use CUDA), or an `IterableDataset` that never calls `get_worker_info()`
        (each worker would replay the whole stream). At run time the doctor measures how long each
        step waits for the next batch, and `tune` tries several worker counts on your own training.
    """
    why = """
        With `num_workers=0` the loader reads, decodes and augments every sample in the training
        process, between optimizer steps. The model sits idle while the batch is built, so a step
        costs *data time + compute time* instead of *max(data, compute)*. With workers, batches
        are prepared in parallel processes while the model computes.
    """
    example = """
        ```python
        loader = DataLoader(dataset, batch_size=64, shuffle=True)  # num_workers=0
        for x, y in loader:
            ...
        ```
    """
    use_instead = """
        ```python
        loader = DataLoader(
            dataset, batch_size=64, shuffle=True,
            num_workers=4,            # start near the core count, then measure
            persistent_workers=True,  # keep workers alive across epochs
        )
        ```
        `pitstop tune` measures several worker counts on your script and keeps one only when it
        beats the noise; the engine takes the count from `Recipe.num_workers`.
    """
    when_not = """
        When samples are already tensors in memory and need no per-sample work, the
        inter-process transfer costs more than it saves. On a machine with few cores (2 here)
        workers take cores away from the intra-op threads of the model: the doctor only
        recommends workers when data wait is a measurable share of the step (> 5%), and
        `tune` keeps them only if the measured speed-up beats run-to-run noise.
    """
    references = (
        "PyTorch docs, torch.utils.data — Single- and Multi-process Data Loading: https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
        "PyTorch Performance Tuning Guide — Enable async data loading and augmentation: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Seed 002 (Workers in dataloader), seed 003 (num_workers > 0 and pin_memory=True)",
    )
    engine = "Recipe.num_workers, Recipe.persistent_workers and Recipe.prefetch set the training DataLoader's workers, worker persistence and prefetch_factor (pitstop.engine.make_loader; fit rebuilds a given loader only when a field is set)."


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes, scope


class NumWorkersRule(LintRule, tip="PIT101"):
    message = "DataLoader loads batches in the training process (num_workers=0); set num_workers"
    in_tests, runs = False, "use"  # paid per batch of the loops that iterate the loader

    def visit_Call(self, node):
        ctx = self.ctx
        if not ctx.is_dataloader(node):
            return
        a, message = nodes.arg(node, "num_workers", 5), None
        if a is not None and nodes.int_value(a.value) is None:
            option = ctx.argparse_default(a.value)  # num_workers=args.workers, with default=0 in this file
            if option is None or option.value != 0 or isinstance(option.value, bool):
                return
            message = (f"DataLoader loads batches in the training process by default ({option.option} defaults "
                       f"to 0); set num_workers")
        elif not (a is None and not nodes.has_star_args(node) or a is not None and nodes.int_value(a.value) == 0):
            return
        training = scope.loader_scope(ctx, node)  # None: an evaluation / one-off / in-memory / test loader
        if training is not None:
            self.report(node, message, when=training)


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Measurement, Outcome  # noqa: E402


class LoaderWorkersBench(Benchmark, tip="PIT101"):
    title = "DataLoader epoch over a CPU-heavy dataset: num_workers=0 vs one worker per core"
    claim = Claim(
        seed="002",
        text="PyTorch allows loading data on multiple processes simultaneously; set the number of workers to "
             "the number of CPU cores",
        baseline="num_workers=0",
        candidate="num_workers=cores",
        ratio_of="epoch time with num_workers=0 / with one worker per core",
    )

    def run(self, ctx):
        import os

        from torch.utils.data import DataLoader

        from pitstop.examples.data import SyntheticImages

        cores = os.cpu_count() or 1
        n = ctx.size(tiny=32, quick=96, full=256)
        batch = 16 if n < 64 else 32
        dataset = SyntheticImages(n=n, size=32, work=6, seed=0)
        counts = {"num_workers=0": 0, "num_workers=1": 1, "num_workers=cores": cores}
        if cores == 1:
            del counts["num_workers=1"]  # the same as num_workers=cores
        loaders = {name: DataLoader(dataset, batch_size=batch, num_workers=w, persistent_workers=w > 0)
                   for name, w in counts.items()}

        def epoch(loader):
            for _ in loader:
                pass

        try:
            # the first epoch starts the worker processes: reported apart, not timed with the rest
            start = ctx.first_call(lambda: epoch(loaders["num_workers=cores"]))
            measured = ctx.time({name: (lambda ld=ld: epoch(ld)) for name, ld in loaders.items()},
                                work=float(n), work_unit="samples")
        finally:
            for loader in loaders.values():
                it = getattr(loader, "_iterator", None)
                if it is not None and hasattr(it, "_shutdown_workers"):
                    it._shutdown_workers()  # persistent workers: stop them now, not at interpreter exit
            loaders.clear()
        first = Measurement("first epoch incl. worker start (num_workers=cores)", (start,), unit="s",
                            work=float(n), work_unit="samples", info=True)
        comparisons = []
        if "num_workers=1" in counts:
            comparisons.append(Comparison("num_workers=0", "num_workers=1", "one worker vs none"))
        return Outcome(
            workload=f"SyntheticImages (3x32x32, 6 blur passes per sample, ~1 ms of NumPy each), {n} samples, "
                     f"batch {batch}; loader only, no model; cores = {cores}; persistent workers, "
                     f"started before timing",
            measurements=[*measured, first],
            comparisons=comparisons,
            notes=["Loading alone: in training the workers also compete with the model's compute threads for "
                   "the same cores, so the gain on a whole step is smaller (`pitstop tune` measures that)."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, ms, pct  # noqa: E402
from pitstop.doctor.analysis.records import CpuRecord  # noqa: E402


class DataWaitCheck(Check, tip="PIT101"):
    """Decided from what the cores did during the wait (``obs.cpu``), not a rule of thumb: an idle
    wait (I/O, sleeping) -> workers overlap it; a CPU-bound wait -> workers need spare cores (low
    without one); more workers than spare cores with little CPU work of their own -> *fewer*
    workers; CPU-heavy workers on busy cores -> cheaper per-sample work (low); workers idle on a
    machine with free cores (I/O-bound) -> more workers."""

    looks_at = "time the step blocks in DataLoader iteration, and what the cores did meanwhile"
    gpu_role = "trace"  # on a GPU the cost is the GPU's idle while the host waits in the DataLoader
    #: the HF Trainer builds the DataLoader itself; Lightning, Fabric and Accelerate use the user's
    framework_fixes = {"transformers": "TrainingArguments(dataloader_num_workers=N, "
                                       "dataloader_persistent_workers=True)"}

    def check(self, obs, th):
        share = obs.share("data")
        loaders = obs.train_loaders()
        if share <= th.data_wait_share or not loaders:
            return
        wait, mean = obs.seconds("data"), obs.mean_step
        workers = max(d.num_workers for d in loaders)
        cores, threads = obs.usable_cores, obs.settings.num_threads
        spare = cores - threads if cores and threads else None
        cpu = obs.cpu or CpuRecord()
        head = f"{pct(share)} of each step ({ms(wait)} of {ms(mean)}) waits for the next batch"
        where = [d.where for d in loaders if d.where]
        if workers == 0:
            evidence, fix, severity = self._no_workers(obs, share, wait, cpu, cores, threads, spare)
            evidence = f"{head}; {evidence}"
        else:
            found = self._with_workers(obs, share, mean, workers, cpu, cores, threads, spare)
            if found is not None:
                title, evidence, fix, severity = found
                yield self.finding(th, title=title, evidence=f"{head}; {evidence}", fix=fix, share=share,
                                   seconds=wait, severity=severity, where=where)
                return
            evidence = (f"{head} although num_workers={workers}: the workers do not keep up; faster loading saves "
                        f"up to {pct(share)}" + (f" ({cores} CPU cores, {threads} intra-op threads)." if cores else "."))
            fix, severity = "more workers or a larger prefetch_factor, or cheaper per-sample work", None
            if spare is not None and workers > max(spare, 0) and not obs.on_cuda:
                evidence += (" There are more workers than spare cores: more workers would take cores from the "
                             "training compute.")
                fix = ("cheaper per-sample work (or pre-processed data); `pitstop tune` measures fewer workers "
                       "on the real loop")
                severity = "low"
        yield self.finding(th, title="Training waits for data (impact: an upper bound)", evidence=evidence,
                           fix=fix, share=share, seconds=wait, severity=severity, where=where)

    @staticmethod
    def _no_workers(obs, share, wait, cpu, cores, threads, spare):
        busy = cpu.data_wait_cpu_per_step
        fix = ("DataLoader(..., num_workers=N, persistent_workers=True), N near the spare core count; the gain "
               "is an upper bound: `pitstop tune` measures it on the real loop")
        base = "the training DataLoader builds every batch in the training process (num_workers=0)"
        if busy is not None and wait > 0 and busy / wait < 0.5:
            return (f"{base}, and during the wait the process used {busy / wait:.2f} CPU-seconds per second: the "
                    f"cores were mostly idle (I/O or sleeping in the Dataset), so workers overlap the wait with "
                    f"compute even though torch runs {threads} intra-op threads. Moving it to workers saves up to "
                    f"{pct(share)}.", fix, None)
        load = f" (the process was busy {busy / wait:.2f} CPU-seconds per second of the wait)" if busy and wait else ""
        if spare is not None and spare < 1 and not obs.on_cuda:
            return (f"{base}{load}. Moving that work to workers saves up to {pct(share)}; but the wait is CPU work "
                    f"and this process may use {cores} CPU cores with torch already running {threads} intra-op "
                    f"threads on them, so loader workers would take cores from compute: the real gain may be much "
                    f"smaller, or none", fix, "low")
        extra = f" ({cores} CPU cores, {threads} intra-op threads)" if cores and threads else ""
        return f"{base}{load}. Moving that work to workers saves up to {pct(share)}{extra}.", fix, None

    @staticmethod
    def _with_workers(obs, share, mean, workers, cpu, cores, threads, spare):
        """(title, evidence, fix, severity) decided from the workers' CPU time, or None."""
        wcpu, pcpu, wait = cpu.workers_per_step, cpu.process_per_step, obs.seconds("data")
        if wcpu is None or pcpu is None or not cores or mean <= 0:
            return None
        demand = (wcpu + pcpu) / mean  # cores kept busy on average by the process and its workers
        others = (cpu.load_avg or 0.0) - (cpu.own_threads or 0)
        busy = demand >= 0.8 * cores or others >= 0.5 * cores  # saturated by us, or by other processes too
        over = spare is not None and workers > max(spare, 0) and not obs.on_cuda
        if over and wcpu < 0.5 * wait:
            fewer = max(spare, 0)
            return ("DataLoader workers oversubscribe the CPU cores",
                    f"num_workers={workers} on {cores} cores where torch runs {threads} intra-op threads, but the "
                    f"workers spent only {ms(wcpu)} of CPU per step while the step waited {ms(wait)}: the wait is "
                    f"not their loading work but their competition with the training threads for the cores "
                    + (f"(other processes kept about {others:.1f} more cores busy) " if others >= 0.5 * cores else "")
                    + f"and the hand-over between processes. With num_workers={fewer} the step would do about "
                    f"{ms(wcpu)} of loading itself instead of waiting {ms(wait)}; more workers would make it worse.",
                    f"fewer workers: DataLoader(..., num_workers={fewer}) (cores minus intra-op threads); `pitstop "
                    "tune` tries fewer workers on the real loop", "medium")
        if over:
            return ("Training waits for CPU-bound data loading, with no spare cores",
                    f"num_workers={workers} on {cores} cores where torch runs {threads} intra-op threads; the workers "
                    f"spent {ms(wcpu)} of CPU per step ({demand:.1f} cores busy on average with the training "
                    "process): loading is CPU work and no core is free, so more workers cannot help and fewer would "
                    "load slower.",
                    "cheaper per-sample work (pre-processed data, lighter augmentation), or fewer intra-op threads "
                    "for more loading; `pitstop tune` measures worker counts on the real loop", "low")
        per_worker = wcpu / mean / workers
        if per_worker < 0.5 and not busy:
            return ("Training waits for data: the workers are mostly idle (I/O-bound)",
                    f"the {workers} workers used {per_worker:.2f} CPU-seconds per second each and the cores were "
                    f"not saturated ({demand:.1f} of {cores} busy): they wait on I/O, so more workers (or a larger "
                    f"prefetch_factor) overlap more of it.",
                    "more workers or a larger prefetch_factor (I/O-bound loading does not need free cores)", None)
        return None


#: host time per step below this is Python overhead around a tiny step, not batch preparation
HOST_FLOOR_S = 0.002


class HostBatchCheck(Check, tip="PIT101"):
    """Host work between the optimizer step and the next training forward (``host``): batches
    sampled outside a DataLoader (nanoGPT's ``get_batch``), with the lines the stacks found."""

    looks_at = "time between the optimizer step and the next training forward that no other phase explains"
    gpu_role = "trace"  # on a GPU, host time costs only when the GPU waits for an input pipeline

    def check(self, obs, th):
        share = obs.share("host")
        if share <= th.host_share or obs.seconds("host") < HOST_FLOOR_S or obs.step_boundary == "backward":
            return  # tiny steps: Python overhead; manual updates: "host" holds the update too
        sites = obs.host_sites or []
        shown = [s for s in sites if s.share >= 0.1][:3]
        lines = ", ".join(f"{s.where} ({pct(s.share)} of {sum(x.samples for x in sites)} samples)"
                          for s in shown)
        evidence = (f"{pct(share)} of each step ({ms(obs.seconds('host'))} of {ms(obs.mean_step)}) passes "
                    "between the optimizer step and the next training forward outside any DataLoader, forward "
                    "or evaluation: the model waits for host work"
                    + (f"; the main thread was at {lines}" if lines else "") + ".")
        loaders = obs.train_loaders()
        fix = ("prepare the next batch while the model computes: a Dataset + DataLoader(num_workers=N) or a "
               "background thread that prefetches batches; or make the lines above cheaper"
               if not loaders else "move this per-batch work into the Dataset/DataLoader workers, or make it cheaper")
        yield self.finding(th, title="Host work before each forward (impact: an upper bound)", evidence=evidence,
                           fix=fix, share=share, seconds=obs.seconds("host"), where=[s.where for s in shown])


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class WorkersKnob(Knob, tip="PIT101"):
    """DataLoader workers (persistent): a few counts up to the number of cores (up to half of
    them when the training itself runs on the CPU), or, when the loader already has workers,
    fewer of them (down to none: workers that oversubscribe the cores slow the training
    compute down).

    Script mode patches ``DataLoader.__init__`` in the child so that every loader the
    script builds with ``num_workers=0`` gets ``value`` workers and ``persistent_workers=True``
    (evaluation loaders too: the script is not changed, so they cannot be told apart), or
    every loader with more than ``value`` workers gets ``value``.
    """

    name = "workers"
    title = "DataLoader workers"
    order = 40

    def applies(self, ctx):
        if ctx.loader_workers is None:
            return Applicability(False, "no torch DataLoader was iterated for training")
        if ctx.loader_workers == 0 and ctx.cpu_count < 2:
            return Applicability(False, "one CPU core: workers could only take it away from the training process")
        return Applicability(True)

    def values(self, ctx):
        c, w = ctx.cpu_count, ctx.loader_workers or 0
        if w > 0:  # the loader already has workers: try fewer (oversubscribed cores), and none
            return sorted({v for v in (0, w // 2, max(0, c // 2)) if 0 <= v < w})
        # training on the CPU: the step's compute already uses every core (intra-op threads),
        # so workers beyond half the cores only take cores from it; on a GPU the main process
        # mostly waits and up to every core is worth trying
        most = c if ctx.on_cuda else max(1, c // 2)
        return sorted({v for v in (1 if c <= 2 else 2, max(1, c // 2), c) if 1 <= v <= most})

    def label(self, value):
        return f"num_workers={value}"

    def phases(self, value, ctx):
        # adding workers to a loader that has none only hides batch loading (training and
        # evaluation loaders alike); fewer workers may also give cores back to the compute
        return ("data", "eval") if not ctx.loader_workers else ()

    def recipe_fields(self, value, ctx):
        return {"num_workers": int(value), "persistent_workers": int(value) > 0}

    def apply_in_child(self, value, **options):
        from torch.utils.data import DataLoader

        from pitstop.tune.patch import patch_init

        n = int(value)

        def change(args):
            had = args.get("num_workers", 0)
            if had == 0 and n > 0:
                args["num_workers"] = n
                args["persistent_workers"] = True
            elif had > n:  # fewer workers than the script asked for
                args["num_workers"] = n
                if n == 0:  # options that need workers are refused by DataLoader with none
                    args.pop("persistent_workers", None)
                    args.pop("prefetch_factor", None)
                    args.pop("multiprocessing_context", None)
                    args.pop("worker_init_fn", None)

        patch_init(DataLoader, change)

    def snippet(self, value, ctx):
        return f"""
            train_loader = DataLoader(train_set, batch_size=..., shuffle=True,
                                      num_workers={value}{", persistent_workers=True" if int(value) > 0 else ""})
        """


# --- trace face ---
from pitstop.trace.check import TraceCheck  # noqa: E402


class InputBoundTrace(TraceCheck, tip="PIT101"):
    looks_at, impact_basis = "GPU idle while the host is inside DataLoader __next__, inside the profiler steps", "idle"

    def check(self, rank, th):
        dl = rank.dataloader
        if dl.share is None or dl.share < th.input_share:
            return
        yield self.finding(
            th, rank, title="steps wait for the input pipeline", impact=dl.share,
            evidence=(f"the GPU sat idle {pct(dl.share)} of the step while the host was in DataLoader __next__ "
                      f"(the host spent {pct(dl.host_share)} of the step there, {ms(dl.seconds_per_step)} per step)"),
            fix="load batches in worker processes: DataLoader(num_workers=<number of cores>, pin_memory=True, "
                "persistent_workers=True); move per-sample CPU work out of the training process")
