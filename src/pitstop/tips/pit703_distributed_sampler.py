"""PIT703 distributed-sampler: give each DDP rank its own shard, reshuffled every epoch."""

from __future__ import annotations

from pitstop.catalog import Tip


class DistributedSamplerTip(Tip):
    code = "PIT703"
    slug = "distributed-sampler"
    title = "DDP without DistributedSampler (or without set_epoch) repeats data across ranks or epochs"
    faces = "LDE"
    seeds = ()
    truth = ""

    what = """
        Flags a file that uses `DistributedDataParallel` and builds a training `DataLoader`
        without `sampler=` (reported at the DataLoader), or builds a shuffling
        `DistributedSampler` while no file of the project calls `.set_epoch(` (reported at the
        sampler; the project is every linted file under the folder above the file's outermost
        package). Evaluation loaders and samplers (named so, or `shuffle=False`) are not
        flagged, nor are unit tests. No fix is offered. At run time the
        doctor checks, when a process group of more than one rank is initialized or the model
        is DistributedDataParallel, whether the training loader gives each rank its own part
        of the data (a `DistributedSampler`); the missing `set_epoch` is the lint rule's job.
    """
    why = """
        DDP synchronizes gradients; it does not split the data. Without a `DistributedSampler`
        every rank iterates the whole dataset: an epoch costs as much compute per rank as on a
        single device, and ranks that shuffle with the same seed see the same batches, so
        averaging their identical gradients buys nothing for N times the hardware.

        `DistributedSampler` gives rank r every N-th index of one permutation shared by all
        ranks. That permutation is seeded with `seed + epoch`; without `set_epoch(epoch)` the
        epoch stays 0 and every epoch replays the same order. Checked here: two passes over a
        `DistributedSampler(range(10), num_replicas=2, rank=0)` without `set_epoch` yielded the
        same indices `[4, 7, 3, 0, 6]`; after `set_epoch(1)` they changed.
    """
    example = """
        ```python
        model = DDP(model, device_ids=[local_rank])
        loader = DataLoader(dataset, batch_size=64, shuffle=True)  # every rank reads it all
        ```
        or, with a sampler that never reshuffles:
        ```python
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)
        for epoch in range(epochs):
            for x, y in loader:              # same order every epoch
                ...
        ```
    """
    use_instead = """
        ```python
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)  # no shuffle= here
        for epoch in range(epochs):
            sampler.set_epoch(epoch)         # before iterating the loader
            for x, y in loader:
                ...
        ```
        The sampler does the shuffling: `DataLoader` raises `ValueError` ("sampler option is
        mutually exclusive with shuffle") if you pass both.
    """
    when_not = """
        An `IterableDataset` (streaming data) takes no sampler: shard inside the dataset by
        rank (and by DataLoader worker) instead. Data already split into one shard per rank
        needs no sampler either. `set_epoch` only matters with `shuffle=True`. For validation,
        note that `DistributedSampler` by default pads the index list by repeating samples so
        that every rank gets the same count (checked here: 11 samples over 2 ranks gave rank 1
        six indices, one of them repeated), which skews exact metrics slightly; with
        `drop_last=True` the tail is dropped instead. Account for either when a metric must be
        exact.
    """
    references = (
        "PyTorch docs, torch.utils.data.distributed.DistributedSampler (set_epoch): https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",
        "PyTorch tutorial, Getting Started with Distributed Data Parallel: https://pytorch.org/tutorials/intermediate/ddp_tutorial.html",
        "PyTorch docs, torch.utils.data — Iterable-style datasets (sharding across workers): https://pytorch.org/docs/stable/data.html#iterable-style-datasets",
        "Beyond the seeds (seed 002's DDP section implies each GPU gets a portion of the data; the sampler is what does it); related: PIT701",
    )
    engine = "Under DDP, fit gives a loader without one a DistributedSampler (shuffling as the loader did, seeded with Recipe.seed) and calls sampler.set_epoch(epoch) before every epoch."


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes, scope

_SAMPLER = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})


class DistributedSamplerRule(LintRule, tip="PIT703"):
    message = "DataLoader under DDP without a sampler: every rank reads the whole dataset; use a DistributedSampler"
    in_tests = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.ddp = False
        self.set_epoch = False
        self.loaders = []
        self.samplers = []

    def visit_Call(self, node):
        ctx = self.ctx
        q = ctx.call_name(node)
        if ctx.is_ddp(node):
            self.ddp = True
        elif q in _SAMPLER:
            shuffle = nodes.arg(node, "shuffle", 3)
            # shuffle=False (an evaluation sampler) needs no set_epoch; neither does an evaluation one
            if not (shuffle is not None and nodes.is_false(shuffle.value)) and scope.loader_scope(ctx, node, False):
                self.samplers.append(node)
        elif ctx.is_dataloader(node):
            if (nodes.arg(node, "sampler", 3) is None and nodes.arg(node, "batch_sampler", 4) is None
                    and not nodes.has_star_args(node) and scope.loader_scope(ctx, node, False) is not None):
                self.loaders.append(node)
        elif nodes.method(node) == "set_epoch":
            self.set_epoch = True

    def finish(self):
        if self.ddp:
            for node in self.loaders:
                self.report(node)
        project = self.ctx.project
        if project is not None and project.calls_method(self.ctx.path, "set_epoch"):
            self.set_epoch = True  # called in another module of the project (timm's train.py for its loader.py)
        if not self.set_epoch:
            for node in self.samplers:
                self.report(node, "DistributedSampler without sampler.set_epoch(epoch): every epoch sees the same order")


# --- doctor face ---
from pitstop.doctor.check import Check  # noqa: E402


class DistributedSamplerCheck(Check, tip="PIT703"):
    looks_at = "DistributedDataParallel training without a DistributedSampler"

    def check(self, obs, th):
        if not any(m.ddp for m in obs.models) and (obs.settings.world_size or 1) <= 1:
            return
        plain = [d for d in obs.train_loaders() if not d.distributed_sampler]
        if plain:
            yield self.finding(
                th, title="DDP without a DistributedSampler: every rank trains on the same data",
                evidence=f"training runs on {obs.settings.world_size or 'several'} ranks (DistributedDataParallel) "
                         f"but the training DataLoader uses {plain[0].sampler}.",
                fix="DataLoader(ds, sampler=DistributedSampler(ds), ...) and sampler.set_epoch(epoch) every epoch",
                kind="correctness", severity="high", where=[d.where for d in plain if d.where])


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class StragglerTrace(TraceCheck, tip="PIT703"):
    looks_at = "ranks the others wait for inside collectives, steadily (pitstop.ranks)"

    def check_job(self, job, th):
        for s in job.stragglers:
            rank = next((r for r in job.ranks if r.rank == s.rank), None)
            step = rank.step_time.median if rank is not None and rank.step_time else None
            yield self.finding(
                th, rank, title=f"rank {s.rank} is a straggler", impact=(s.lag / step) if step else None,
                evidence=(s.evidence + "; the trace cannot tell why (uneven shards, slower input, a slower GPU "
                          "or node)"),
                fix="give every rank the same amount of work: DistributedSampler (drop_last=True) and the same "
                    "batch shapes; then compare the slow rank's input pipeline and host")
