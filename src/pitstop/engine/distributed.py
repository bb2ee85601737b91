"""Data-parallel training on torch.distributed: DistributedDataParallel, launched by torchrun.

Nothing home-made: ``torch.distributed`` holds the process group (``gloo`` on CPU, ``nccl``
on CUDA), ``DistributedDataParallel`` all-reduces gradients in buckets during backward, and
``DistributedSampler`` gives each rank its own shard (``set_epoch`` reshuffles per epoch).
A script calls :func:`init_distributed` once, then ``make_step`` / ``fit`` see the group
and wrap the model; launch it with::

    torchrun --standalone --nproc-per-node 2 train.py

``wrap_model(..., strategy="fsdp2")`` shards the model with FSDP2 instead
(:mod:`pitstop.engine.sharded`, ``Recipe(strategy="fsdp2")``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DistInfo", "init_distributed", "dist_info", "wrap_model", "unwrap_model", "all_gather_objects",
           "all_reduce_sum"]


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(backend: str | None = None) -> DistInfo:
    """Join the process group that ``torchrun`` describes (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``... in the environment, read by ``init_process_group``'s ``env://``).
    Backend: ``nccl`` when CUDA is available, else ``gloo``. Without torchrun's variables
    this is a single process and nothing is initialized. Idempotent."""
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build")
    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return DistInfo()
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend or ("nccl" if cuda else "gloo"))
    return dist_info()


def dist_info() -> DistInfo:
    """Rank, world size and local rank of this process (a single process if no group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    rank = dist.get_rank()
    return DistInfo(rank=rank, world_size=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", rank)))


def wrap_model(model: nn.Module, device: torch.device, *, strategy: str = "ddp", **options: Any) -> nn.Module:
    """Wrap for data parallelism. ``ddp``: ``DistributedDataParallel`` (``device_ids`` on
    CUDA, none on CPU). ``fsdp2``: ``fully_shard`` per block and at the root, in place
    (:func:`pitstop.engine.sharded.shard_model`, ``options`` are its keywords); the module
    returned is the model itself, its parameters replaced by sharded ``DTensor`` ones (an
    optimizer must be built, or rebuilt, on them)."""
    if strategy == "fsdp2":
        from pitstop.engine.sharded import shard_model

        shard_model(model, device, **options)
        return model
    if strategy != "ddp":
        raise ValueError(f"distributed strategy {strategy!r} is not one of 'ddp', 'fsdp2'")
    if isinstance(model, DistributedDataParallel):
        return model
    device_ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DDP and/or ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def all_gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (a collective: all ranks call)."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few floats over the ranks (a collective; once per log interval, never per step)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return t.tolist()
