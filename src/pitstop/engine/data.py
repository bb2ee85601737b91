"""Getting batches to the step: loaders built from the recipe, device moves, a CUDA prefetcher,
and the grouping of micro-batches for gradient accumulation.

- :func:`make_loader` / :func:`adapt_loader`: a ``DataLoader`` with the recipe's
  ``num_workers`` / ``pin_memory`` / ``persistent_workers`` / ``prefetch`` (PIT101, PIT102),
  and a ``DistributedSampler`` under DDP (PIT703). A field left ``None`` keeps the loader's own
  setting, and a loader that needs no change is returned as it is.
- :func:`move_batch`: tensors of a (nested) batch to the device with ``non_blocking=True``
  (PIT103), 4-D floating tensors to ``channels_last`` when asked (PIT104).
- :class:`CudaPrefetcher`: copies the next batch on a side stream while the current one
  computes. CUDA only; on CPU nothing is moved and nothing is prefetched.
- :func:`micro_batches`: groups of ``accumulate`` micro-batches, each weighted by its share of
  the group's samples, so a short last group (the epoch's tail) is averaged correctly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from pitstop.engine.distributed import DistInfo
from pitstop.engine.recipe import Recipe

__all__ = ["make_loader", "adapt_loader", "move_batch", "batch_size_of", "micro_batches", "CudaPrefetcher",
           "device_batches"]


def move_batch(batch: Any, device: torch.device, non_blocking: bool = True, channels_last: bool = False) -> Any:
    """``batch`` with every tensor on ``device`` (tuples, lists and dicts are walked)."""
    if isinstance(batch, torch.Tensor):
        if channels_last and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(device, non_blocking=non_blocking, memory_format=torch.channels_last)
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [move_batch(b, device, non_blocking, channels_last) for b in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, dict):
        return type(batch)((k, move_batch(v, device, non_blocking, channels_last)) for k, v in batch.items())
    return batch


def _record_stream(batch: Any, stream: torch.cuda.Stream) -> None:
    if isinstance(batch, torch.Tensor):
        batch.record_stream(stream)
    elif isinstance(batch, (list, tuple)):
        for b in batch:
            _record_stream(b, stream)
    elif isinstance(batch, dict):
        for b in batch.values():
            _record_stream(b, stream)


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor (1 if it holds none)."""
    if type(batch) in (tuple, list) and batch and type(batch[0]) is torch.Tensor and batch[0].ndim:
        return batch[0].shape[0]  # the common (x, y) batch, without the walk below
    while not isinstance(batch, torch.Tensor):
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return 1
    return batch.shape[0] if batch.dim() else 1


def micro_batches(batches: Iterator[Any], accumulate: int) -> Iterator[tuple[Any, float, bool, int]]:
    """Yield ``(batch, weight, boundary, n)``. ``weight`` is the batch's share of its group's
    samples (the loss is multiplied by it, so the group's gradient is the mean over all its
    samples, also for a short last group); ``boundary`` marks the group's last micro-batch,
    after which the optimizer steps. A group is read ahead (``accumulate`` host batches) to
    know its size before the first backward."""
    if accumulate == 1:
        for batch in batches:
            yield batch, 1.0, True, batch_size_of(batch)
        return
    while True:
        group = list(islice(batches, accumulate))
        if not group:
            return
        sizes = [batch_size_of(b) for b in group]
        total = sum(sizes)
        last = len(group) - 1
        for i, batch in enumerate(group):
            yield batch, sizes[i] / total, i == last, sizes[i]


class CudaPrefetcher:
    """Overlap the host-to-device copy of the next item with the compute of the current one.

    The copy is queued on a side stream; before an item is handed out, the compute stream
    waits for that stream (``wait_stream``), and ``record_stream`` tells the caching allocator
    that the compute stream uses the tensors, so their memory is not reused too early. The
    copy is only asynchronous from pinned memory (``pin_memory=True``, PIT102).
    ``items`` yields tuples whose first element is the batch.

    Per item the hot path is one event record (on the copy stream, after the copy) and one
    event wait (on the compute stream), with the same :class:`torch.cuda.Event` re-recorded:
    ``Stream.wait_stream`` would create a new event per step. A wait enqueued before the
    next record waits for the copy it was meant for (CUDA waits on the record current at the
    time of the wait).
    """

    def __init__(self, items: Iterable[tuple], device: torch.device, move: Callable[[Any], Any]):
        if device.type != "cuda":
            raise ValueError(f"CudaPrefetcher needs a CUDA device, got {device}")
        self.items, self.device, self.move = items, device, move
        self.stream = torch.cuda.Stream(device=device)
        self.copied = torch.cuda.Event()

    def _load(self, it: Iterator[tuple]) -> tuple | None:
        try:
            item = next(it)
        except StopIteration:
            return None
        with torch.cuda.stream(self.stream):
            moved = (self.move(item[0]), *item[1:])
        self.copied.record(self.stream)
        return moved

    def __iter__(self) -> Iterator[tuple]:
        it = iter(self.items)
        current = torch.cuda.current_stream(self.device)
        nxt = self._load(it)
        while nxt is not None:
            current.wait_event(self.copied)  # this item's copy (recorded last), not a later one
            item = nxt
            _record_stream(item[0], current)
            nxt = self._load(it)  # queue the next copy before the caller queues its compute
            yield item


def device_batches(items: Iterable[tuple], device: torch.device, recipe: Recipe) -> Iterable[tuple]:
    """``items`` (tuples, batch first) with the batch moved for the step: prefetched on CUDA,
    converted to channels_last if asked, untouched otherwise (CPU: no copy at all)."""
    if device.type == "cuda":
        def move(b: Any) -> Any:
            return move_batch(b, device, recipe.non_blocking, recipe.channels_last)
        return CudaPrefetcher(items, device, move)
    if device.type == "cpu" and not recipe.channels_last:
        return items
    return ((move_batch(item[0], device, recipe.non_blocking, recipe.channels_last), *item[1:]) for item in items)


def _loader_kwargs(recipe: Recipe, device: torch.device, base: dict[str, Any]) -> dict[str, Any]:
    workers = recipe.num_workers if recipe.num_workers is not None else base["num_workers"]
    pin = recipe.pin_memory if recipe.pin_memory is not None else base["pin_memory"]
    if device.type != "cuda":
        pin = False  # nothing to pin for: torch would warn and ignore it (PIT102)
    persistent = recipe.persistent_workers if recipe.persistent_workers is not None else base["persistent_workers"]
    prefetch = recipe.prefetch if recipe.prefetch is not None else base["prefetch_factor"]
    if workers == 0:
        persistent, prefetch = False, None
    return {"num_workers": workers, "pin_memory": pin, "persistent_workers": persistent, "prefetch_factor": prefetch}


def make_loader(dataset: Any, batch_size: int, recipe: Recipe, *, shuffle: bool = True, drop_last: bool = False,
                collate_fn: Callable | None = None, generator: torch.Generator | None = None,
                device: torch.device | str = "cpu", dist: DistInfo | None = None) -> DataLoader:
    """A training ``DataLoader`` from the recipe's loader settings. Defaults where the recipe
    says ``None``: no workers, pinned memory when ``device`` is CUDA, persistent workers when
    there are workers. Under DDP the sampler is a ``DistributedSampler`` (seeded with
    ``recipe.seed``) and ``batch_size`` is per process."""
    device = torch.device(device)
    base = {"num_workers": 0, "pin_memory": device.type == "cuda", "persistent_workers": True, "prefetch_factor": None}
    kw = _loader_kwargs(recipe, device, base)
    sampler = None
    if dist is not None and dist.enabled and not isinstance(dataset, IterableDataset):
        sampler = DistributedSampler(dataset, num_replicas=dist.world_size, rank=dist.rank, shuffle=shuffle,
                                     seed=recipe.seed or 0, drop_last=drop_last)
        shuffle = False
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler, drop_last=drop_last,
                      collate_fn=collate_fn, generator=generator, **kw)


def adapt_loader(loader: Iterable, recipe: Recipe, *, device: torch.device, dist: DistInfo) -> Iterable:
    """``loader`` rebuilt with the recipe's loader settings and, under DDP, a
    ``DistributedSampler``; returned unchanged when nothing differs (or when it is not a
    ``DataLoader``: any iterable of batches works, unchanged)."""
    if not isinstance(loader, DataLoader):
        return loader
    base = {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor}
    kw = _loader_kwargs(recipe, device, base)
    shard = dist.enabled and not isinstance(loader.dataset, IterableDataset) and not isinstance(loader.sampler, DistributedSampler)
    if kw == base and not shard:
        return loader
    sampler, batch_sampler, batch_size, drop_last = loader.sampler, None, loader.batch_size, loader.drop_last
    if batch_size is None and not isinstance(loader.dataset, IterableDataset):
        if shard:
            raise ValueError("fit under DDP: the train loader uses a custom batch_sampler, which pitstop cannot shard; "
                             "build it with a DistributedSampler (pitstop.engine.make_loader does)")
        batch_sampler, sampler = loader.batch_sampler, None
    if shard:
        sampler = DistributedSampler(loader.dataset, num_replicas=dist.world_size, rank=dist.rank,
                                     shuffle=isinstance(loader.sampler, RandomSampler), seed=recipe.seed or 0,
                                     drop_last=drop_last)
    if isinstance(loader.dataset, IterableDataset):
        sampler = None
    extra: dict[str, Any] = {"batch_sampler": batch_sampler} if batch_sampler is not None else \
        {"batch_size": batch_size, "drop_last": drop_last, "sampler": sampler}
    return DataLoader(loader.dataset, collate_fn=loader.collate_fn, timeout=loader.timeout,
                      worker_init_fn=loader.worker_init_fn, multiprocessing_context=loader.multiprocessing_context,
                      generator=loader.generator, **extra, **kw)
