"""PIT703 distributed-sampler: give each DDP rank its own shard, reshuffled every epoch."""

from __future__ import annotations

from pitstop.tips._base import Tip


class DistributedSamplerTip(Tip):
    code = "PIT703"
    slug = "distributed-sampler"
    title = "DDP without DistributedSampler (or without set_epoch) repeats data across ranks or epochs"
    faces = "LDE"
    seeds = ()
    truth = ""

    what = """
        Flags a file that uses `DistributedDataParallel` and builds a `DataLoader` without
        `sampler=` (reported at the DataLoader), or builds a `DistributedSampler` and never
        calls `.set_epoch(` (reported at the sampler). No fix is offered. At run time the
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


# --- doctor face ---
from pitstop.doctor.check import Check  # noqa: E402


class DistributedSamplerCheck(Check, tip="PIT703"):
    looks_at = "DistributedDataParallel training without a DistributedSampler"

    def check(self, obs, th):
        if not any(m.get("ddp") for m in obs.models) and (obs.settings.get("world_size") or 1) <= 1:
            return
        plain = [d for d in obs.train_loaders() if not d.get("distributed_sampler")]
        if plain:
            yield self.finding(
                th, title="DDP without a DistributedSampler: every rank trains on the same data",
                evidence=f"training runs on {obs.settings.get('world_size') or 'several'} ranks (DistributedDataParallel) "
                         f"but the training DataLoader uses {plain[0]['sampler']}.",
                fix="DataLoader(ds, sampler=DistributedSampler(ds), ...) and sampler.set_epoch(epoch) every epoch",
                kind="correctness", severity="high", where=[d["where"] for d in plain if d.get("where")])
