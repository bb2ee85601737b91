"""API mode: ``pitstop.tune(model, optimizer_factory, loss_fn, loader)`` for engine users.

Trials run in this process through :func:`pitstop.make_step` with candidate
:class:`pitstop.Recipe` objects, so everything the engine can do is a knob here, fp16 with
its GradScaler and gradient accumulation included. Every run starts from the same state:

- the model is deep-copied once, before anything runs, and every run trains a fresh
  ``copy.deepcopy`` of that pristine copy (same initial weights and buffers);
- the optimizer is built fresh by ``optimizer_factory(params)`` (empty state);
- every RNG is seeded with ``seed`` before the run (``pitstop.seed_everything``), so a
  shuffling loader yields the same batches in the same order.

A run times ``warmup + steps`` optimizer steps; each step's wall time includes waiting for
its batches (so loader knobs count) and, on CUDA, a ``synchronize()`` at its end. Losses
stay on the device and are read once, after the run. A run that raises is reported
``error`` (out of memory: ``oom``) and the search goes on. In-process runs cannot be
killed: the ``timeout`` is checked between steps (use script mode for hard timeouts).
"""

from __future__ import annotations

import copy
import gc
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

from pitstop.doctor.record.clocks import StepClocks
from pitstop.doctor.record.batch import first_tensor
from pitstop.doctor.record.oom.blocks import find_blocks
from pitstop.engine.data import adapt_loader, batch_size_of
from pitstop.gpu import cuda_device
from pitstop.machine import usable_cores
from pitstop.engine.distributed import DistInfo
from pitstop.engine.prepare import optimizer_impl_of
from pitstop.engine.recipe import Recipe
from pitstop.engine.step import make_step
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.peak import is_oom, tracked_peak
from pitstop.tune.run import Run
from pitstop.tune.options import merge_recipe_fields

__all__ = ["ApiBackend", "find_blocks"]


class ApiBackend:
    """Runs configurations in process through ``make_step`` (see the module docstring)."""

    mode = "api"

    def __init__(self, model: nn.Module, optimizer_factory: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor], loader: Iterable, *, recipe: Recipe | None = None,
                 seed: int = 0, track_memory: bool | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(optimizer_factory):
            raise TypeError("optimizer_factory must be callable: params -> optimizer, "
                            "e.g. lambda p: torch.optim.AdamW(p, lr=1e-3)")
        self.recipe = recipe if recipe is not None else Recipe()
        self.pristine = copy.deepcopy(model)
        self.optimizer_factory, self.loss_fn, self.loader, self.seed = optimizer_factory, loss_fn, loader, seed
        p = next(model.parameters(), None)
        self.device = p.device if p is not None else torch.device("cpu")
        if self.recipe.device != "auto":
            self.device = torch.device(self.recipe.device)
        self.track_memory = (self.device.type == "cpu") if track_memory is None else track_memory
        self.target = f"pitstop.tune({type(model).__name__})"
        self.batch_size: int | None = None
        self.ctx: Context | None = None

    # -- what the knobs see -------------------------------------------------------------
    def context(self) -> Context:
        model = self.pristine
        opt = self.optimizer_factory(copy.deepcopy(model).parameters())
        impl = optimizer_impl_of(opt)
        if impl == "default":
            impl = "foreach" if self.device.type == "cuda" else "for-loop"
        import inspect

        first = next(iter(self.loader))
        x = first_tensor(first)
        self.batch_size = batch_size_of(first)
        is_dl = isinstance(self.loader, DataLoader)
        gpu = cuda_device(self.device) if self.device.type == "cuda" else None
        self.ctx = Context(
            mode="api", device=self.device.type, cpu_count=usable_cores(), num_threads=torch.get_num_threads(),
            device_name=gpu.name if gpu else torch.backends.cpu.get_cpu_capability(),
            capability=gpu.capability if gpu else None, conv2d=sum(isinstance(m, nn.Conv2d) for m in model.modules()),
            input_dims=x.dim() if x is not None else None,
            autocast=None if self.recipe.precision in ("fp32", "tf32") else self.recipe.precision,
            compiled=self.recipe.compile is not None, optimizer=type(opt).__name__, optimizer_mode=impl,
            fused_available="fused" in inspect.signature(type(opt).__init__).parameters,
            loader_workers=(self.recipe.num_workers if self.recipe.num_workers is not None else self.loader.num_workers)
            if is_dl else None,
            pin_memory=self.loader.pin_memory if is_dl else None, batch_size=self.batch_size,
            cudnn_benchmark=self.recipe.cudnn_benchmark,
            float32_matmul_precision="high" if self.recipe.precision == "tf32" else torch.get_float32_matmul_precision(),
            blocks=find_blocks(model))
        return self.ctx

    def recipe_for(self, settings: Sequence[Setting], knobs: Sequence[Knob], ctx: Context | None = None) -> Recipe:
        index = {(k.tip, k.name): k for k in knobs}
        ctx = ctx or self.ctx or Context(mode="api", device=self.device.type)
        fields, conflict = merge_recipe_fields([index[(s.code, s.knob)].recipe_fields(s.value, ctx) for s in settings])
        if conflict:
            raise ValueError(conflict)
        return self.recipe.replace(**fields)

    def loader_for(self, recipe: Recipe, batch_size: int | None) -> Iterable:
        loader = self.loader
        if batch_size is not None and batch_size != self.batch_size:
            if not isinstance(loader, DataLoader) or loader.batch_size is None:
                raise ValueError("a batch-size sweep needs a torch DataLoader built with batch_size=")
            loader = DataLoader(loader.dataset, batch_size=batch_size, shuffle=isinstance(loader.sampler, RandomSampler),
                                collate_fn=loader.collate_fn, drop_last=loader.drop_last, num_workers=loader.num_workers,
                                pin_memory=loader.pin_memory, persistent_workers=loader.persistent_workers,
                                generator=loader.generator)
        return adapt_loader(loader, recipe, device=self.device, dist=DistInfo())

    def close(self) -> None:
        """Nothing to stop: runs are in this process."""

    # -- one run ----------------------------------------------------------------------------
    def run(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, round: int = 0, timeout: float = 300.0,
            steps: int = 10, warmup: int = 3, batch_size: int | None = None, memory_only: bool = False,
            recipe: Recipe | None = None) -> Run:
        """One run: a fresh copy of the model and optimizer under the recipe of ``settings``,
        ``warmup + steps`` timed optimizer steps (none with ``memory_only``), then the peak memory."""
        started = time.perf_counter()
        run = Run(status="ok", round=round)
        training = _Training(self.device)
        try:
            recipe = recipe if recipe is not None else self.recipe_for(settings, knobs)
            training.start(self, recipe, batch_size)
            if training.cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            self._timed_steps(training, run, 0 if memory_only else warmup + steps, warmup, started, timeout)
            self._peak_memory(training, run, memory_only)
        except Exception as exc:  # a failing trial is a result, not the end of the search
            run.status = "oom" if is_oom(exc) else "error"
            run.message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            run.traceback = traceback.format_exc()
        finally:
            training.close(keep=self.loader)
        run.elapsed = time.perf_counter() - started
        return run

    @staticmethod
    def _timed_steps(training: _Training, run: Run, n: int, warmup: int, started: float, timeout: float) -> None:
        """``n`` optimizer steps; the first ``warmup`` are timed apart. Losses are read once, after."""
        loss_tensors = []
        clocks = StepClocks()
        for i in range(n):
            t0, c0 = time.perf_counter(), time.process_time()
            clocks.mark()
            loss, samples = training.one_step()
            if training.cuda:
                torch.cuda.synchronize(training.device)  # the step's time, not its launch
            dt = time.perf_counter() - t0
            (run.warmup_times if i < warmup else run.step_times).append(dt)
            if i >= warmup:  # CPU time of this process and its loader workers, run-queue delay
                lap = clocks.lap()
                run.cpu_times.append(time.process_time() - c0 + lap.get("cpu_children", 0.0))
                run.run_delays.append(lap.get("run_delay"))
                run.actives.append(lap.get("main_active"))
            loss_tensors.append(loss)
            run.batch_size = samples
            if time.perf_counter() - started > timeout:
                run.status = "timeout"
                run.message = f"stopped after {i + 1} optimizer steps: over the {timeout:.0f} s timeout"
                break
        run.losses = [float(t) for t in loss_tensors]  # one read per step, after the run

    def _peak_memory(self, training: _Training, run: Run, memory_only: bool) -> None:
        """CUDA: the allocator's peak (of one more step with ``memory_only``); CPU: one
        extra, untimed step under ``MemTracker`` when memory is tracked."""
        if training.cuda:
            run.peak_memory = int(torch.cuda.max_memory_allocated(self.device))
        elif self.track_memory or memory_only:
            holder: list[int] = []
            run.peak_memory = tracked_peak(lambda: holder.append(training.one_step()[1]), training.step.model,
                                           training.step.optimizer)
            if holder:
                run.batch_size = holder[0]
        if memory_only and training.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            training.one_step()
            torch.cuda.synchronize(self.device)
            run.peak_memory = int(torch.cuda.max_memory_allocated(self.device))


class _Training:
    """What one run trains: a fresh model copy, its optimizer, the loader and the step; built
    piece by piece by :meth:`start` so that :meth:`close` frees whatever was built."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.step: Any = None
        self.loader: Any = None
        self.it: Any = None
        self.model: nn.Module | None = None
        self.accumulate = 1

    def start(self, backend: ApiBackend, recipe: Recipe, batch_size: int | None) -> None:
        from pitstop.helpers.seed import seed_everything

        seed_everything(backend.seed)
        self.model = copy.deepcopy(backend.pristine)
        opt = backend.optimizer_factory(self.model.parameters())
        self.loader = backend.loader_for(recipe, batch_size)
        self.step = make_step(self.model, opt, backend.loss_fn, recipe, device=self.device)
        self.accumulate = recipe.accumulate
        self.model.train()
        self.it = iter(self.loader)

    def _next_batch(self) -> Any:
        try:
            return next(self.it)
        except StopIteration:  # a new epoch
            self.it = iter(self.loader)
            return next(self.it)

    def one_step(self) -> tuple[torch.Tensor, int]:
        """One optimizer step (``accumulate`` micro-batches): its loss tensor and its samples."""
        losses, samples = [], 0
        for _ in range(self.accumulate):
            batch = self._next_batch()
            samples += batch_size_of(batch)
            losses.append(self.step(batch))
        return (losses[0] if len(losses) == 1 else torch.stack(losses).mean()), samples

    def close(self, keep: Any) -> None:
        """Close the step, stop the workers of a loader built for this run (not ``keep``, the
        user's), drop every reference and free the memory."""
        if self.step is not None:
            self.step.close()
        if self.loader is not None and self.loader is not keep:
            _shutdown(self.loader)
        self.step = self.it = self.model = self.loader = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def _shutdown(loader: Any) -> None:
    """Stop the persistent workers of a loader this run built (they would outlive it)."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
