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
        Flags a file that uses `DistributedDataParallel` (or FSDP) and builds a training `DataLoader`
        without `sampler=` (reported at the DataLoader), or builds a shuffling
        `DistributedSampler` while no file of the project calls `.set_epoch(` (reported at the
        sampler; the project is every linted file under the folder above the file's outermost
        package). Evaluation loaders and samplers (named so, or `shuffle=False`) are not
        flagged, nor are unit tests. No fix is offered. At run time the
        doctor checks, when a process group of more than one rank is initialized or the model
        is DistributedDataParallel, whether the training loader gives each rank its own part
        of the data (a `DistributedSampler`). Under `pitstop doctor --nproc-per-node N` it
        measures instead: it fingerprints the first batch every rank receives in each step
        (crc32 of the first bytes of its first tensor) and reports identical batches across
        ranks, and a `DistributedSampler` that starts a new epoch with the epoch number it
        already had (`set_epoch` never called). A rank the others steadily wait for is a
        straggler, PIT704.
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
from pitstop.lint.rule import LintRule, cst, nodes, scope

_SAMPLER = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
#: data-parallel wrappers besides DDP: each rank must read its own shard under FSDP too
_FSDP = frozenset({"torch.distributed.fsdp.FullyShardedDataParallel",
                   "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
                   "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard"})


class DistributedSamplerRule(LintRule, tip="PIT703"):
    runs = "step"  # paid every step wherever the reported line is
    message = "DataLoader under DDP (or FSDP) without a sampler: every rank reads the whole dataset; use a DistributedSampler"
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
        if ctx.is_ddp(node) or q in _FSDP:
            self.ddp = True
        elif q in _SAMPLER:
            shuffle = nodes.arg(node, "shuffle", 3)
            # shuffle=False (an evaluation sampler) needs no set_epoch; neither does an evaluation one
            if not (shuffle is not None and self._off(shuffle.value)) and scope.loader_scope(ctx, node, False):
                self.samplers.append(node)
        elif ctx.is_dataloader(node):
            if (nodes.arg(node, "sampler", 3) is None and nodes.arg(node, "batch_sampler", 4) is None
                    and not nodes.has_star_args(node) and scope.loader_scope(ctx, node, False) is not None):
                self.loaders.append(node)
        elif nodes.method(node) == "set_epoch":
            self.set_epoch = True

    def _off(self, value) -> bool:
        """``shuffle=`` is False: a literal, a value the file pins (an argparse default), or the parameter
        of the enclosing function whose default is False (a sampler factory's ``shuffle: bool = False``:
        whether any caller turns it on is not in this file, so no finding on the guess)."""
        if nodes.is_false(value) or self.ctx.constant(value) is False:
            return True
        fn = self.ctx.current_function()
        if isinstance(value, cst.Name) and fn is not None:
            for p in (*fn.params.params, *fn.params.kwonly_params):
                if p.name.value == value.value:
                    return p.default is not None and nodes.is_false(p.default)
        return False

    def finish(self):
        if self.ddp:
            for node in self.loaders:
                self.report(node)
        project = self.ctx.project
        if project is not None and project.calls_method(self.ctx.path, "set_epoch"):
            self.set_epoch = True  # called in another module of the project (timm's train.py for its loader.py)
        if not self.set_epoch:
            for node in self.samplers:  # its cost is every epoch's pass over the loader it feeds (issue 42)
                self.report(node, "DistributedSampler without sampler.set_epoch(epoch): every epoch sees the same order",
                            runs="pass:epoch")


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class DistributedSamplerCheck(Check, tip="PIT703"):
    looks_at = "DistributedDataParallel training without a DistributedSampler"

    def check(self, obs, th):
        if obs.distributed is not None:  # a torchrun job: SameBatchesCheck measures it
            return
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


def _job_skip(obs) -> str | None:
    job = obs.distributed
    if job is None or not job.merged:
        return "needs a torchrun job of 2 ranks or more (pitstop doctor --nproc-per-node N)"
    if not job.initialized:
        return "the ranks never joined a process group (independent processes)"
    return None


class SameBatchesCheck(Check, tip="PIT703"):
    scope = "job"
    looks_at = "fingerprints of the batches each rank received in the same step, DistributedSampler epochs"

    def skip_reason(self, obs):
        return _job_skip(obs)

    def check(self, obs, th):
        ranks = obs.distributed.ranks
        common = set.intersection(*(set(r.fingerprints) for r in ranks))
        same = sorted((k for k in common if len({r.fingerprints[k] for r in ranks}) == 1), key=int)
        where = [d.where for d in obs.train_loaders() if d.where]
        if len(common) >= 2 and len(same) >= th.same_batch_share * len(common):
            sampler = obs.train_loader.sampler if obs.train_loader else "its sampler"
            yield self.finding(
                th, title=f"all {len(ranks)} ranks trained on identical batches: the data is not split across ranks",
                evidence=(f"the first batch of a step was the same on every rank in {len(same)} of {len(common)} "
                          f"steps (fingerprint of its first tensor); the training DataLoader uses {sampler}, so "
                          f"every rank computes the same gradients and {len(ranks) - 1} of {len(ranks)} ranks' work "
                          "is repeated."),
                fix="DataLoader(ds, sampler=DistributedSampler(ds), ...) and sampler.set_epoch(epoch) every epoch",
                kind="correctness", severity="high", where=where)
            return
        stale = [r.rank for r in ranks if len(r.sampler_epochs) >= 2 and len(set(r.sampler_epochs)) < len(r.sampler_epochs)]
        if stale:
            epochs = ranks[0].sampler_epochs
            yield self.finding(
                th, title="DistributedSampler without set_epoch: every epoch repeats the same order",
                evidence=(f"the sampler started {len(epochs)} epochs with epoch numbers {list(epochs)} on ranks "
                          f"{', '.join(map(str, stale))}: set_epoch was not called, so each epoch reshuffles with "
                          "the same seed and every rank sees its shard in the same order every epoch."),
                fix="call sampler.set_epoch(epoch) at the start of every epoch", kind="correctness",
                severity="medium", where=where)
