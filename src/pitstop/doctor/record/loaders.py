"""The DataLoader observer (full mode): which loaders ran, how they are configured, and how
long the step waited for their batches.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`. ``DataLoader.__iter__``
records each loader's settings once (its role turns ``train`` when it is iterated with
gradients enabled); ``_BaseDataLoaderIter.__next__`` is timed: the wait is the ``data``
phase of the step (``eval`` with gradients off), with the process CPU time it took and the
CPU seconds of the worker processes (:class:`~pitstop.doctor.record.cores.WorkerClock`).
:attr:`LoaderObserver.busy` is nonzero while a batch is fetched (syncs there are the
loader's, not the script's).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from pitstop.doctor.record.cores import WorkerClock
from pitstop.doctor.record.patching import Patches, as_method, user_site
from pitstop.doctor.record.steps import StepLog

__all__ = ["LoaderObserver"]

perf = time.perf_counter


class LoaderObserver:
    """See the module docstring."""

    def __init__(self, log: StepLog) -> None:
        self.log = log
        self.loaders: dict[int, dict[str, Any]] = {}
        self.busy = 0  # batches being fetched now
        self.worker_clock = WorkerClock()
        self.worker_cpu: list[float] = []  # per observed step: CPU seconds of the workers
        self.data_cpu: list[float] = []    # per observed step: process CPU seconds in data waits
        self.step_cpu = 0.0  # process CPU seconds in data waits, step in progress
        self._orig_iter: Any = None
        self._orig_next: Any = None

    def install(self, patches: Patches) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._orig_iter = patches.set(DataLoader, "__iter__", as_method(self._dl_iter))
        self._orig_next = patches.set(_BaseDataLoaderIter, "__next__", as_method(self._dl_next))

    def end_step(self, kind: str) -> None:
        """The step ends (before its record is kept): keep its data-wait CPU time."""
        if kind == "observed":
            self.data_cpu.append(self.step_cpu)

    def new_step(self) -> None:
        self.step_cpu = 0.0

    def read_workers(self, ended: str) -> None:
        """After a warmup or observed step: the workers' CPU seconds since the last read."""
        if self.worker_clock.last and ended in ("warmup", "observed"):
            spent = self.worker_clock.read()
            if ended == "observed":
                self.worker_cpu.append(spent)

    def _dl_iter(self, loader):
        it = self._orig_iter(loader)
        if not self.log.passive:
            info = self.loaders.get(id(loader))
            if info is None:
                from torch.utils.data.distributed import DistributedSampler

                sampler = getattr(loader, "sampler", None)
                bs = getattr(loader, "batch_sampler", None)
                info = self.loaders[id(loader)] = {
                    "role": "eval", "num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
                    "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor,
                    "batch_size": loader.batch_size, "sampler": type(sampler).__name__,
                    "distributed_sampler": isinstance(sampler, DistributedSampler)
                    or isinstance(getattr(bs, "sampler", None), DistributedSampler),
                    "where": user_site(2, through_torch=True)}
            if torch.is_grad_enabled():
                info["role"] = "train"
        return it

    def _dl_next(self, it):
        log = self.log
        if log.quiet:
            return self._orig_next(it)
        t0, c0 = perf(), time.process_time()
        self.busy += 1
        try:
            return self._orig_next(it)
        finally:
            self.busy -= 1
            train = torch.is_grad_enabled()
            t1 = perf()
            log.cur.phases["data" if train else "eval"] += t1 - t0
            if not train:
                log.eval_mark(t0, t1)
            if train:
                self.step_cpu += time.process_time() - c0
                workers = getattr(it, "_workers", None)
                if workers and log.kind() in ("warmup", "observed"):
                    self.worker_clock.add(getattr(w, "pid", None) for w in workers)
