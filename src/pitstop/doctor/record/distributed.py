"""The distributed recorder (one rank of a torchrun job): collectives, DDP's gradient
reduction, batch fingerprints, sampler epochs.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`, installed only when the
child runs as one rank of ``pitstop doctor --nproc-per-node N``:

- ``torch.distributed.init_process_group`` is wrapped: whether the script joined a group;
- the collectives of ``torch.distributed`` (``all_reduce``, ``broadcast``, ``barrier`` ...)
  are wrapped: calls, seconds inside a blocking call, bytes of ``all_reduce``;
- every ``DistributedDataParallel`` gets, at its first forward, a comm hook doing what DDP's
  default does (divide by the world size, all-reduce the bucket asynchronously) and noting
  when each bucket was launched and when its all-reduce completed. The backward's wait is
  the last bucket's completion minus its launch (its gradients are the backward's last
  compute); a round starts at bucket 0. A script that registers its own hook keeps it
  (rounds are then counted from nothing: ``reduction_source`` says so);
- FSDP's all-gathers and reduce-scatters (FSDP2 ``fully_shard``, FSDP1) are told apart by
  their caller and handed to :class:`~pitstop.doctor.record.sharding.ShardRecorder` (kind,
  duration, bytes, forward or backward, unit), which also reads the units and settings;
- the first training batch of each step a ``DataLoader`` returns is fingerprinted (crc32 of
  the first 4 KiB of its first tensor, CPU tensors only: no device sync);
- ``DistributedSampler.__iter__`` records the sampler's epoch (``set_epoch`` forgotten: the
  same epoch twice).
"""

from __future__ import annotations

import os
import sys
import time
import weakref
import zlib
from typing import Any

import torch

from pitstop.doctor.analysis.dist_records import JobRecord, RankDist
from pitstop.doctor.record.patching import Patches, as_method
from pitstop.doctor.record.sharding import GATHERS, SCATTERS, ShardRecorder
from pitstop.doctor.record.steps import StepLog

__all__ = ["DistRecorder", "COLLECTIVES", "fingerprint"]

perf = time.perf_counter

#: the ``torch.distributed`` functions timed as collectives
COLLECTIVES = ("all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "gather", "scatter",
               "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
               "all_gather_single", "reduce_scatter_single", "_all_gather_base", "_reduce_scatter_base")
_SHARDING = frozenset(GATHERS + SCATTERS)
_LOGGING_KEYS = ("bucket_sizes", "avg_backward_compute_time", "avg_backward_comm_time",
                 "avg_backward_compute_comm_overlap_time", "avg_forward_compute_time", "comm_hook", "backend_name",
                 "gradient_as_bucket_view", "find_unused_parameters", "static_graph", "unused_parameter_size")
_FP_BYTES = 4096


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            t = _first_tensor(item)
            if t is not None:
                return t
    return None


def fingerprint(batch: Any) -> str | None:
    """crc32 of the shape and the first bytes of the batch's first tensor (CPU only)."""
    t = _first_tensor(batch)
    if t is None or t.device.type != "cpu" or t.numel() == 0:
        return None
    flat = t.detach().reshape(-1)
    n = max(1, _FP_BYTES // max(flat.element_size(), 1))
    head = flat[:n].contiguous()
    try:
        raw = head.view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError):
        raw = repr(head.tolist()).encode()
    return f"{zlib.crc32(repr(tuple(t.shape)).encode() + raw):08x}"


class DistRecorder:
    """See the module docstring."""

    def __init__(self, log: StepLog, patches: Patches) -> None:
        self.log, self.patches = log, patches
        env = os.environ
        self.rank, self.local_rank = int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0))
        self.world_size = int(env.get("WORLD_SIZE", 1))
        self.initialized, self.backend = False, None
        self.source = ""
        self.calls: dict[str, int] = {}
        self.fingerprints: dict[str, str] = {}
        self.sampler_epochs: list[int] = []
        self.models: list[weakref.ref] = []
        self._hooked: set[int] = set()
        self._inside: tuple[str, float] | None = None
        self._failed_in: tuple[str, float] | None = None  # the last collective that raised
        self._rounds: list[tuple[list[float], list[float]]] = []  # step in progress: (launches, completions)
        self._step = {"wait": 0.0, "bytes": 0, "buckets": 0}
        self.backwards: list[int] = []  # backward passes per observed step
        self.per_step: dict[str, list] = {k: [] for k in ("waits", "reduction_waits", "reductions", "buckets",
                                                           "allreduce_bytes")}
        self._orig: dict[str, Any] = {}
        self.shard = ShardRecorder(log)

    # -- install -------------------------------------------------------------------------
    def install(self) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.data.dataloader import _BaseDataLoaderIter
        from torch.utils.data.distributed import DistributedSampler

        if not dist.is_available():
            return
        self._orig["init"] = self.patches.set(dist, "init_process_group", self._init)
        for name in COLLECTIVES:
            if hasattr(dist, name):
                self._orig[name] = orig = getattr(dist, name)
                self.patches.set(dist, name, self._timed(name, orig))
        self._orig["all_reduce_raw"] = self._orig.get("all_reduce", dist.all_reduce)
        self._orig["ddp_forward"] = self.patches.set(DistributedDataParallel, "forward", as_method(self._ddp_forward))
        self._orig["next"] = self.patches.set(_BaseDataLoaderIter, "__next__", as_method(self._next))
        self._orig["sampler_iter"] = self.patches.set(DistributedSampler, "__iter__", as_method(self._sampler_iter))
        self.shard.install(self.patches)

    def _init(self, *args, **kwargs):
        out = self._orig["init"](*args, **kwargs)
        import torch.distributed as dist

        self.initialized = True
        try:
            self.backend = str(dist.get_backend())
        except (RuntimeError, ValueError):
            pass
        return out

    def _timed(self, name: str, orig):
        def collective(*args, **kwargs):
            if self.log.passive or self._inside is not None:
                return orig(*args, **kwargs)
            kind = self.shard.kind_of(name, sys._getframe(1).f_globals.get("__name__", "")) if name in _SHARDING else None
            t0 = perf()
            self._inside = (name, t0)
            try:
                out = orig(*args, **kwargs)
            except BaseException:  # a peer went away, an interruption: the report names what it was in
                self._failed_in = (name, t0)
                raise
            finally:
                self._inside = None
            self._failed_in = None  # caught and carried on: that failure is not where the run ended
            if self.log.kind() == "observed":
                blocking = not kwargs.get("async_op")
                took = perf() - t0
                if kind is not None:  # FSDP's own: timed apart (the step's waits include it)
                    self.shard.note(kind, took if blocking else None, args, kwargs)
                else:
                    self.calls[name] = self.calls.get(name, 0) + 1
                if blocking:
                    self._step["wait"] += took
                t = args[0] if args else kwargs.get("tensor")
                if name == "all_reduce" and isinstance(t, torch.Tensor):
                    self._step["bytes"] += t.numel() * t.element_size()
            return out
        collective.__wrapped__ = orig  # type: ignore[attr-defined]
        return collective

    # -- DDP's gradient reduction ------------------------------------------------------------
    def _ddp_forward(self, ddp, *args, **kwargs):
        if id(ddp) not in self._hooked:
            self._hooked.add(id(ddp))
            self.models.append(weakref.ref(ddp))
            if getattr(ddp, "_comm_hooks", None):
                self.source = "user comm hook (not timed)"
            else:
                try:
                    ddp.register_comm_hook(ddp.process_group, self._hook)
                    self.source = self.source or "pitstop comm hook"
                except RuntimeError:  # a built-in hook is registered already
                    self.source = "user comm hook (not timed)"
        return self._orig["ddp_forward"](ddp, *args, **kwargs)

    def _hook(self, group, bucket):
        buf = bucket.buffer()
        recording = not self.log.passive and self.log.kind() == "observed"
        buf.div_(group.size())
        t0 = perf()
        fut = self._orig["all_reduce_raw"](buf, group=group, async_op=True).get_future()
        if not recording:
            return fut.then(lambda f: f.value()[0])
        if bucket.index() == 0 or not self._rounds:
            self._rounds.append(([], []))
        launches, done = self._rounds[-1]
        launches.append(t0)
        self._step["bytes"] += buf.numel() * buf.element_size()
        self._step["buckets"] += 1

        def completed(f):
            out = f.value()[0]  # a failed all-reduce (a peer went away) raises here: the round stays open
            done.append(perf())
            return out
        return fut.then(completed)

    # -- batches and samplers ------------------------------------------------------------------
    def _next(self, it):
        batch = self._orig["next"](it)
        key = str(self.log.index)
        if not self.log.passive and torch.is_grad_enabled() and key not in self.fingerprints:
            fp = fingerprint(batch)
            if fp is not None:
                self.fingerprints[key] = fp
        return batch

    def _sampler_iter(self, sampler):
        if not self.log.passive:
            self.sampler_epochs.append(int(getattr(sampler, "epoch", 0)))
        return self._orig["sampler_iter"](sampler)

    # -- steps ------------------------------------------------------------------------------
    def end_step(self, kind: str, backward_calls: int) -> None:
        if kind == "observed":
            red = 0.0
            for launches, done in self._rounds:
                if launches and done:
                    red += max(0.0, max(done) - max(launches))
            ps = self.per_step
            ps["reduction_waits"].append(red)
            ps["waits"].append(red + self._step["wait"])
            ps["reductions"].append(len(self._rounds))
            ps["buckets"].append(self._step["buckets"])
            ps["allreduce_bytes"].append(self._step["bytes"])
            self.backwards.append(backward_calls)
        self.shard.end_step(kind)
        self._rounds = []
        self._step = {"wait": 0.0, "bytes": 0, "buckets": 0}

    # -- the record ------------------------------------------------------------------------------
    def _logging_data(self) -> dict[str, Any]:
        for ref in self.models:
            ddp = ref()
            if ddp is None:
                continue
            try:
                data = ddp._get_ddp_logging_data()
            except (RuntimeError, AttributeError):
                continue
            return {k: data[k] for k in _LOGGING_KEYS if k in data}
        return {}

    def _block_bytes(self) -> tuple[int, ...]:
        from pitstop.engine.sharded import shard_blocks

        for ref in self.models:
            ddp = ref()
            if ddp is None:
                continue
            inner = ddp.module
            named = dict(inner.named_modules())
            return tuple(sum(p.numel() * p.element_size() for p in named[n].parameters()) for n in shard_blocks(inner))
        return ()

    def record(self) -> JobRecord:
        waiting_in = waiting_s = None
        now = perf()
        if self._inside is not None or self._failed_in is not None:
            name, t0 = self._inside or self._failed_in
            waiting_in, waiting_s = name, now - t0
        elif self._rounds and len(self._rounds[-1][1]) < len(self._rounds[-1][0]):
            waiting_in, waiting_s = "DDP gradient all-reduce", now - self._rounds[-1][0][-1]
        ps = self.per_step
        rank = RankDist(
            rank=self.rank, local_rank=self.local_rank, world_size=self.world_size, initialized=self.initialized,
            backend=self.backend, waits=tuple(ps["waits"]), reduction_waits=tuple(ps["reduction_waits"]),
            reductions=tuple(ps["reductions"]), buckets=tuple(ps["buckets"]),
            allreduce_bytes=tuple(ps["allreduce_bytes"]), backwards=tuple(self.backwards),
            collective_calls=dict(self.calls), fingerprints=dict(self.fingerprints),
            sampler_epochs=tuple(self.sampler_epochs), reduction_source=self.source,
            ddp_logging=self._logging_data(), waiting_in=waiting_in, waiting_s=waiting_s, shard=self.shard.record(),
            block_bytes=self._block_bytes())
        return JobRecord(world_size=self.world_size, ranks=(rank,))
