"""``make_step``: one correct, lean training step for a model, optimizer, loss and Recipe.

A call runs one micro-batch::

    forward + loss under the precision's autocast (never the backward, PIT305)
    loss * weight (1/accumulate by default: the mean over the effective batch, PIT802)
    backward (GradScaler-scaled under fp16), inside DDP no_sync() unless it is the group's last
    micro-batch (PIT702)
    at the group's end: unscale_ then clip (PIT303), optimizer step (skipped by the scaler on
    inf/NaN gradients), zero_grad(set_to_none=True) (PIT403, PIT801)

and returns the loss detached, without reading it on the host: no sync per step (PIT201).
The only host syncs are GradScaler's own (fp16) and ``Recipe.skip_nonfinite``'s check.

Everything recipe-dependent is decided once when the step is built, so the fp32 step costs
what a hand-written loop costs. Process-wide flags it sets (TF32, cuDNN benchmark, intra-op threads,
deterministic algorithms) are put back by :meth:`Step.close` (or leaving ``with``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from pitstop.engine.data import move_batch
from pitstop.engine.distributed import dist_info, wrap_model
from pitstop.engine.precision import BackendFlags, make_precision
from pitstop.engine.prepare import (apply_activation_checkpointing, remove_activation_checkpointing,
                                    switch_optimizer_impl)
from pitstop.engine.recipe import Recipe

__all__ = ["make_step", "Step", "LossError", "resolve_device"]

LossFn = Callable[[nn.Module, Any], torch.Tensor]


class LossError(TypeError):
    """``loss_fn`` returned something other than a scalar tensor that requires grad."""


def resolve_device(name: str) -> torch.device:
    """``Recipe.device`` to a ``torch.device``; ``"auto"`` is this rank's CUDA device if
    CUDA is available, else the CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", dist_info().local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"Recipe.device={name!r} but CUDA is not available in this torch build/machine")
    return device


class Step:
    """Callable training step; build it with :func:`make_step`.

    Attributes: ``model`` (the user's module), ``train_model`` (what the forward runs: the
    model, DDP-wrapped and/or compiled), ``optimizer`` (a rebuilt one if
    ``Recipe.optimizer_impl`` asked for another implementation), ``precision`` (its
    ``scaler`` under fp16), ``device``, ``micro`` (micro-batches already accumulated in the
    current group), ``steps`` (optimizer steps taken) and ``skipped`` (steps skipped for a
    non-finite loss with ``skip_nonfinite``).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, recipe: Recipe, *,
                 scaler: torch.amp.GradScaler | None = None, device: torch.device | str | None = None):
        if not isinstance(recipe, Recipe):
            raise TypeError(f"recipe must be a pitstop Recipe, got {type(recipe).__name__}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable as loss_fn(model, batch), got {loss_fn!r}")
        self.recipe = recipe
        self.device = resolve_device(recipe.device) if device is None else torch.device(device)
        ddp = model if isinstance(model, DistributedDataParallel) else None
        model = ddp.module if ddp is not None else model
        self.flags = BackendFlags()
        self.precision = make_precision(recipe.precision, self.device.type, scaler)
        self.precision.set_flags(self.flags)
        if recipe.threads is not None:
            self.flags.set_threads(recipe.threads)
        if recipe.cudnn_benchmark:
            self.flags.set(torch.backends.cudnn, "benchmark", True)
        if recipe.deterministic:
            self.flags.set_deterministic(True)
            self.flags.set(torch.backends.cudnn, "benchmark", False)
            self.flags.set(torch.backends.cudnn, "deterministic", True)
        try:
            if any(p.device != self.device for p in model.parameters()):
                model.to(self.device)
            if recipe.channels_last:
                model.to(memory_format=torch.channels_last)
            if recipe.checkpoint_activations:
                apply_activation_checkpointing(model, recipe.checkpoint_activations)
            self.shard_plan = None
            if recipe.strategy == "fsdp2":
                if ddp is not None:
                    raise ValueError("Recipe(strategy='fsdp2') got a DistributedDataParallel model: pass the module")
                self.shard_plan, optimizer = _shard(model, optimizer, self.device, recipe)
            self.optimizer = switch_optimizer_impl(optimizer, recipe.optimizer_impl)
        except Exception:
            self.close()
            raise
        self.model = model
        train_model: nn.Module = ddp if ddp is not None else model
        info = dist_info()
        if ddp is None and info.enabled and self.shard_plan is None:
            train_model = wrap_model(model, self.device)
        self.ddp = train_model if isinstance(train_model, DistributedDataParallel) else None
        if recipe.compile:
            train_model = torch.compile(train_model, mode=recipe.compile)
        self.train_model = train_model
        self.loss_fn = loss_fn
        self.accumulate = recipe.accumulate
        self.micro = 0
        self.steps = 0
        self.skipped = 0
        self._inv_k = 1.0 / recipe.accumulate
        self._no_sync = self.ddp.no_sync if self.ddp is not None else None
        if self.shard_plan is not None:  # FSDP2: no reduce-scatter on the group's other micro-batches (PIT702)
            self._no_sync = self._fsdp_no_sync
        self.forward_context = self.precision.forward_context()
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self._skip_nonfinite = recipe.skip_nonfinite
        self._clip = recipe.clip_norm is not None or recipe.clip_value is not None
        self._group_loss: torch.Tensor | None = None
        moves = self.device.type != "cpu" or recipe.channels_last
        self._move = (lambda b: move_batch(b, self.device, recipe.non_blocking, recipe.channels_last)) if moves else None

    # -- the hot path ----------------------------------------------------------------
    def __call__(self, batch: Any, *, weight: float | None = None, boundary: bool | None = None) -> torch.Tensor:
        """Run one micro-batch; step the optimizer at the group's end. ``batch`` is moved to
        the device (``non_blocking``) first. ``weight`` (default ``1/accumulate``) multiplies
        the loss before backward; ``boundary`` (default: every ``accumulate``-th call) forces
        the group's end. Returns the loss (unweighted) detached, still on the device."""
        if self._move is not None:
            batch = self._move(batch)
        return self.run(batch, weight=weight, boundary=boundary)

    def run(self, batch: Any, *, weight: float | None = None, boundary: bool | None = None) -> torch.Tensor:
        """:meth:`__call__` for a batch that is already on the device (``fit`` prefetches)."""
        if boundary is None:
            boundary = self.micro + 1 >= self.accumulate
        if weight is None:
            weight = self._inv_k
        if self._no_sync is not None and not boundary:
            with self._no_sync():  # the forward must be inside too, or DDP still syncs
                loss = self._forward_backward(batch, weight)
        else:
            loss = self._forward_backward(batch, weight)
        loss = loss.detach()
        if self._skip_nonfinite:
            self._group_loss = loss if self.micro == 0 else self._group_loss + loss
        if boundary:
            self._optimizer_step()
        else:
            self.micro += 1
        return loss

    @contextlib.contextmanager
    def _fsdp_no_sync(self):
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)

    def _forward_backward(self, batch: Any, weight: float) -> torch.Tensor:
        with self.forward_context:
            loss = self.loss_fn(self.train_model, batch)
        if not isinstance(loss, torch.Tensor) or (loss.ndim != 0 and loss.numel() != 1) or not loss.requires_grad:
            raise LossError(self._loss_problem(loss))
        self.precision.backward(loss if weight == 1.0 else loss * weight)
        return loss

    def _optimizer_step(self) -> None:
        self.micro = 0
        self.steps += 1
        if self._skip_nonfinite and not bool(torch.isfinite(self._group_loss)):  # host sync, opt-in
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return
        if self._clip:
            self.precision.unscale(self.optimizer)  # clip true gradients, not scaled ones
            if self.recipe.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(self._params, self.recipe.clip_norm)
            else:
                torch.nn.utils.clip_grad_value_(self._params, self.recipe.clip_value)
        self.precision.optimizer_step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)

    def _loss_problem(self, loss: Any) -> str:
        where = f"at micro-batch {self.micro + 1} of optimizer step {self.steps + 1}"
        if not isinstance(loss, torch.Tensor):
            return f"loss_fn must return a scalar tensor; it returned {type(loss).__name__} {where}"
        if loss.ndim != 0 and loss.numel() != 1:
            return (f"loss_fn must return a scalar tensor; it returned shape {tuple(loss.shape)} {where} "
                    "(reduce it, e.g. with .mean())")
        return (f"loss_fn returned a tensor that does not require grad {where}: was it computed under "
                "no_grad/inference_mode, or detached?")

    # -- outside the hot path --------------------------------------------------------
    def flush(self) -> bool:
        """Step the optimizer with a partial group (e.g. at the end of the data). The
        accumulated gradients are rescaled from ``micro/accumulate`` to the mean of the
        ``micro`` micro-batches done. Returns whether there was anything to step."""
        if self.micro == 0:
            return False
        if self.ddp is not None or self.shard_plan is not None:
            raise RuntimeError("Step.flush() under DDP or FSDP2: the pending micro-batches ran under no_sync and were never "
                               "all-reduced; pass boundary=True with the last micro-batch instead (fit does)")
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, self.accumulate / self.micro)
        self._optimizer_step()
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"precision": self.precision.state_dict(), "steps": self.steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.precision.load_state_dict(state.get("precision", {}))
        self.steps = int(state.get("steps", self.steps))
        self.skipped = int(state.get("skipped", self.skipped))

    def close(self) -> None:
        """Put back the process-wide flags and the model's original forwards."""
        self.flags.restore()
        if getattr(self, "model", None) is not None and self.recipe.checkpoint_activations:
            remove_activation_checkpointing(self.model)

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shard(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, recipe: Recipe):
    """FSDP2 (``Recipe(strategy="fsdp2")``): the model sharded in place, the optimizer rebuilt
    on its sharded parameters."""
    from pitstop.engine.sharded import rebuild_optimizer, shard_model

    before = {id(p): name for name, p in model.named_parameters(remove_duplicate=False)}
    plan = shard_model(model, device, precision=recipe.precision, units=recipe.shard_units,
                       reshard_after_forward=recipe.reshard_after_forward, prefetch=recipe.shard_prefetch)
    return plan, rebuild_optimizer(optimizer, before, model)


def make_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, recipe: Recipe | None = None,
              *, scaler: torch.amp.GradScaler | None = None, device: torch.device | str | None = None) -> Step:
    """Build a training step: ``step = make_step(model, opt, loss_fn, recipe)``, then
    ``loss = step(batch)`` per micro-batch. ``loss_fn(model, batch)`` returns a scalar loss.

    The model is moved to ``recipe.device`` (``device=`` overrides it), converted to
    channels_last, given activation checkpointing, wrapped in DDP when a process group is
    initialized (:func:`pitstop.engine.init_distributed`) and compiled, as the recipe says.
    Use ``step.optimizer`` afterwards: it is a rebuilt optimizer when
    ``recipe.optimizer_impl`` switched the implementation. ``scaler`` replaces the fp16
    GradScaler (to share one). Call ``step.close()`` (or use ``with``) to restore global flags.
    """
    return Step(model, optimizer, loss_fn, recipe if recipe is not None else Recipe(), scaler=scaler, device=device)
