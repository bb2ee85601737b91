"""PIT101 dataloader-workers: load batches in worker processes, not in the training loop."""

from __future__ import annotations

from pitstop.tips._base import Tip


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
        Flags a training `DataLoader` built without `num_workers` (the default is 0) or with a
        literal `num_workers=0`. Not training loaders, and not flagged: evaluation loaders
        (bound to, passed as, or built by a function named for validation/evaluation/test/
        prediction/inference/sampling/prompts), an ordered pass (`shuffle=False`, no sampler),
        one-off `next(iter(DataLoader(...)))`, unit tests; nor loaders over in-memory data
        (a `TensorDataset`, a list, a Dataset class whose `__getitem__` only indexes, found in
        the file or a linted sibling file) or an `IterableDataset` that never calls
        `get_worker_info()` (each worker would replay the whole stream). At run time the doctor measures how long each step waits for
        the next batch, and `tune` tries several worker counts on your own training.
    """
    why = """
        With `num_workers=0` the loader reads, decodes and augments every sample in the
        training process, between optimizer steps. The model sits idle while the batch is
        built, so a step costs *data time + compute time* instead of *max(data, compute)*.
        With workers, batches are prepared in parallel processes while the model computes.
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
        `pitstop tune` measures several worker counts on your script and keeps one only when
        it beats the noise; the engine takes the count from `Recipe.num_workers`.
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
    in_tests = False

    def visit_Call(self, node):
        ctx = self.ctx
        if not ctx.is_dataloader(node):
            return
        a = nodes.arg(node, "num_workers", 5)
        if a is None and not nodes.has_star_args(node) or a is not None and nodes.int_value(a.value) == 0:
            training = scope.loader_scope(ctx, node)  # None: an evaluation / one-off / in-memory / test loader
            if training is not None:
                self.report(node, when=training)


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
from pitstop.doctor.check import Check, ms, pct  # noqa: E402


class DataWaitCheck(Check, tip="PIT101"):
    looks_at = "time the step blocks in DataLoader iteration"
    #: the HF Trainer builds the DataLoader itself; Lightning, Fabric and Accelerate use the user's
    framework_fixes = {"transformers": "TrainingArguments(dataloader_num_workers=N, "
                                       "dataloader_persistent_workers=True)"}

    def check(self, obs, th):
        share = obs.share("data")
        loaders = obs.train_loaders()
        if share <= th.data_wait_share or not loaders:
            return
        wait, mean = obs.breakdown["data"], obs.step_time["mean"]
        workers = max(d["num_workers"] for d in loaders)
        cores, threads = obs.settings.get("cpu_cores"), obs.settings.get("num_threads")
        spare = cores - threads if cores and threads else None
        head = f"{pct(share)} of each step ({ms(wait)} of {ms(mean)}) waits for the next batch"
        # the data wait is an upper bound on the gain: workers need cores, and on CPU the
        # training's intra-op threads may already use all of them
        if spare is not None and spare < 1 and not obs.on_cuda:
            cpu = (f"; but this process may use {cores} CPU cores and torch already runs {threads} intra-op "
                   f"threads on them, so loader workers would take cores from compute: the real gain may be "
                   f"much smaller, or none")
            severity = "low"
        else:
            cpu = f" ({cores} CPU cores, {threads} intra-op threads)" if cores and threads else ""
            severity = None
        if workers == 0:
            evidence = (f"{head}; the training DataLoader builds every batch in the training process "
                        f"(num_workers=0). Moving that work to workers saves up to {pct(share)}{cpu}.")
            fix = ("DataLoader(..., num_workers=N, persistent_workers=True), N near the spare core count; the gain "
                   "is an upper bound: `pitstop tune` measures it on the real loop")
        else:
            evidence = (f"{head} although num_workers={workers}: the workers do not keep up; faster loading saves "
                        f"up to {pct(share)}{cpu}.")
            fix = "more workers or a larger prefetch_factor, or cheaper per-sample work"
        yield self.finding(th, title="Training waits for data (impact: an upper bound)", evidence=evidence,
                           fix=fix, share=share, seconds=wait, severity=severity,
                           where=[d["where"] for d in loaders if d.get("where")])


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class WorkersKnob(Knob, tip="PIT101"):
    """DataLoader workers (persistent): a few counts up to the number of cores.

    Script mode patches ``DataLoader.__init__`` in the child so that every loader the
    script builds with ``num_workers=0`` gets ``value`` workers and ``persistent_workers=True``
    (evaluation loaders too: the script is not changed, so they cannot be told apart).
    """

    name = "workers"
    title = "DataLoader workers"
    order = 40

    def applies(self, ctx):
        if ctx.loader_workers is None:
            return Applicability(False, "no torch DataLoader was iterated for training")
        if ctx.loader_workers > 0:
            return Applicability(False, f"the training DataLoader already uses num_workers={ctx.loader_workers}")
        if ctx.cpu_count < 2:
            return Applicability(False, "one CPU core: workers could only take it away from the training process")
        return Applicability(True)

    def values(self, ctx):
        c = ctx.cpu_count
        return sorted({v for v in (1 if c <= 2 else 2, max(1, c // 2), c) if 1 <= v <= c})

    def label(self, value):
        return f"num_workers={value}"

    def recipe_fields(self, value, ctx):
        return {"num_workers": int(value), "persistent_workers": True}

    def apply_in_child(self, value, **options):
        from torch.utils.data import DataLoader

        from pitstop.tune.patch import patch_init

        def change(args):
            if args.get("num_workers", 0) == 0:
                args["num_workers"] = int(value)
                args["persistent_workers"] = True

        patch_init(DataLoader, change)

    def snippet(self, value, ctx):
        return f"""
            train_loader = DataLoader(train_set, batch_size=..., shuffle=True,
                                      num_workers={value}, persistent_workers=True)
        """
