"""``fit``: the training loop around :func:`make_step`, read top to bottom.

Per micro-batch the loop does only what a hand-written loop does: take the next batch (on
CUDA, already copied by the prefetcher), run the step, append the detached loss to a list.
Everything that reads device values (logging, NaN checks, evaluation, checkpoints) happens
once per interval. Comments mark every host sync.

Exact resume: at the start of each epoch the loop records every RNG state (and the loader's
generators); a checkpoint stores them with the position in the epoch and the RNG states at
the checkpoint. Resuming restores the epoch-start states, re-creates the loader's iterator
(same shuffle), skips the batches already used (so in-process data randomness is replayed),
then restores the checkpoint-time RNG states: the run continues as if never interrupted
(bitwise on CPU; tested with a seeded shuffling loader and ``num_workers=0``). Limits: on
CUDA the prefetcher has already drawn the next batch when a checkpoint is taken, so data
randomness drawn in the training process (``num_workers=0``) is replayed one batch off; with
``persistent_workers`` the workers' own RNG streams restart on resume.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pitstop.engine.callbacks import Callback, FitResult, FitState, overridden
from pitstop.engine.checkpoint import (checkpoint_path, load_latest, rng_state, save_checkpoint, set_rng_state)
from pitstop.engine.data import adapt_loader, device_batches, micro_batches, move_batch
from pitstop.engine.distributed import all_gather_objects, dist_info
from pitstop.engine.monitor import LossLog, Progress, evaluate
from pitstop.engine.recipe import Recipe
from pitstop.engine.step import LossFn, make_step

__all__ = ["fit"]

FORMAT = 1


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, train_loader: Iterable, *,
        recipe: Recipe, max_steps: int | None = None, epochs: int | None = None, eval_loader: Iterable | None = None,
        eval_fn: Callable[[nn.Module, Any], Any] | None = None, checkpoint_dir: str | Path | None = None,
        checkpoint_every: int | None = None, resume: bool = True, callbacks: Iterable[Callback] = (),
        scheduler: Any = None, log_every: int = 50, eval_every: int | None = None,
        progress: bool | None = None, keep_checkpoints: int | None = 3) -> FitResult:
    """Train ``model`` with ``recipe`` and return a :class:`FitResult`.

    ``loss_fn(model, batch)`` returns the scalar loss of a batch. ``max_steps`` counts
    optimizer steps (an accumulated group of ``recipe.accumulate`` micro-batches is one step);
    ``epochs`` counts passes over ``train_loader``; training stops at whichever comes first
    (one epoch if neither is given). ``eval_loader`` is evaluated with ``eval_fn(model, batch)``
    (default: ``loss_fn``) at the end of every epoch, or every ``eval_every`` steps.
    ``checkpoint_dir``: a checkpoint every ``checkpoint_every`` steps and at the end (rank 0
    writes; the ``keep_checkpoints`` newest are kept); with ``resume`` the newest good one there
    is loaded first. ``scheduler``: an LR scheduler stepped after every optimizer step, or a
    callable ``optimizer -> scheduler`` (needed when ``recipe.optimizer_impl`` rebuilds the
    optimizer). Losses are read on the host once every ``log_every`` steps. ``progress``: a
    rich bar (default: when stderr is a terminal).
    """
    _check_args(recipe, max_steps, epochs, checkpoint_every, log_every, eval_every, callbacks)
    if max_steps is None and epochs is None:
        epochs = 1
    callbacks = list(callbacks)
    info = dist_info()
    if recipe.seed is not None:
        from pitstop.helpers.seed import seed_everything

        seed_everything(recipe.seed)
    started = time.perf_counter()
    with make_step(model, optimizer, loss_fn, recipe) as step:
        sched = _scheduler(scheduler, optimizer, step.optimizer)
        loader = adapt_loader(train_loader, recipe, device=step.device, dist=info)
        step.model.train()
        state = FitState(model=step.model, train_model=step.train_model, runner=step, optimizer=step.optimizer,
                         scheduler=sched, recipe=recipe, rank=info.rank, world_size=info.world_size)
        result = FitResult(steps=0, epochs=0, samples=0, seconds=0.0, last_loss=None)
        resume_rng = None
        if checkpoint_dir is not None and resume:
            found = load_latest(checkpoint_dir, map_location=step.device)
            if found is not None:
                result.resumed_from, ckpt = found
                resume_rng = _restore(ckpt, step, sched, state, recipe, info)
                del ckpt  # drop the loaded copy: the model and optimizer hold their own (PIT404)
                if state.pos == 0:  # saved between epochs: the next epoch starts from here
                    _set_own_rng(resume_rng[1], info)
                    resume_rng = None

        move = None
        if step.device.type != "cpu" or recipe.channels_last:
            def move(b: Any) -> Any:
                return move_batch(b, step.device, recipe.non_blocking, recipe.channels_last)
        losses = LossLog(recipe.skip_nonfinite)
        bar = Progress(progress, _total_steps(loader, recipe, max_steps, epochs), info.rank)
        saved = [-1]  # step of the last checkpoint (the same on every rank)
        on_step = overridden(callbacks, "on_step_end")
        last = {"time": time.perf_counter(), "samples": state.samples}

        def log() -> None:
            if not losses.losses:
                return
            state.last_loss = losses.read(info, state.epoch)  # host sync, once per interval
            now = time.perf_counter()
            rate = (state.samples - last["samples"]) * info.world_size / max(now - last["time"], 1e-9)
            last.update(time=now, samples=state.samples)
            record = {"step": state.step, "epoch": state.epoch, "loss": state.last_loss, "samples_per_s": rate,
                      "lr": step.optimizer.param_groups[0]["lr"]}
            result.history.append(record)
            bar.update(state.step, record)
            for hook in overridden(callbacks, "on_log"):
                hook(state, record)

        def run_eval() -> None:
            metrics = evaluate(step.model, eval_loader, eval_fn or loss_fn, forward_context=step.forward_context, move=move)
            state.last_eval = metrics
            result.evals.append((state.step, metrics))
            for hook in overridden(callbacks, "on_eval"):
                hook(state, metrics)

        def save() -> None:
            saved[0] = state.step
            log()  # never write a checkpoint after an unnoticed inf/NaN
            rngs = all_gather_objects(rng_state(), info)  # collective: every rank's RNG
            if info.is_main:
                path = save_checkpoint(_state(step, sched, state, recipe, rngs, epoch_rng, info),
                                       checkpoint_path(checkpoint_dir, state.step), keep=keep_checkpoints)
                result.checkpoint = path
                for hook in overridden(callbacks, "on_checkpoint"):
                    hook(state, path)

        for hook in overridden(callbacks, "on_fit_start"):
            hook(state)
        done = max_steps is not None and state.step >= max_steps
        epoch_rng: list[Any] = []
        try:
            while not done and (epochs is None or state.epoch < epochs):
                sampler = getattr(loader, "sampler", None)
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(state.epoch)  # PIT703: a new shuffle per epoch
                if resume_rng is not None:  # replay the interrupted epoch's start
                    epoch_rng = resume_rng[0]
                    _set_epoch_rng(epoch_rng, loader, info)
                else:
                    epoch_rng = all_gather_objects(_epoch_rng(loader), info) if checkpoint_dir is not None else []
                batches = iter(loader)
                if state.pos and not (hasattr(loader, "__len__") and state.pos >= len(loader)):
                    for _ in range(state.pos):  # the batches the checkpointed run had used
                        next(batches, None)
                if resume_rng is not None:
                    _set_own_rng(resume_rng[1], info)
                    resume_rng = None
                    if hasattr(loader, "__len__") and state.pos >= len(loader):
                        batches = iter(())
                start_pos = state.pos
                for batch, weight, boundary, n in device_batches(micro_batches(batches, recipe.accumulate),
                                                                  step.device, recipe):
                    loss = step.run(batch, weight=weight, boundary=boundary)
                    losses.add(loss, state.step + 1)
                    state.pos += 1
                    state.samples += n
                    if not boundary:
                        continue
                    state.step += 1
                    if sched is not None:
                        sched.step()
                    for hook in on_step:
                        hook(state, loss)
                    if state.step % log_every == 0:
                        log()
                    if eval_loader is not None and eval_every and state.step % eval_every == 0:
                        run_eval()
                    if checkpoint_dir is not None and checkpoint_every and state.step % checkpoint_every == 0:
                        save()
                    if max_steps is not None and state.step >= max_steps:
                        done = True
                        break
                else:
                    if state.pos == 0 and start_pos == 0:
                        raise ValueError(f"fit: train_loader yielded no batches in epoch {state.epoch} "
                                         "(an exhausted iterator or an empty dataset?)")
                    state.epoch += 1
                    state.pos = 0
                    if eval_loader is not None and not eval_every:
                        run_eval()
            if losses.losses:
                log()
            if eval_loader is not None and (not result.evals or result.evals[-1][0] != state.step):
                run_eval()
            if checkpoint_dir is not None and saved[0] != state.step:
                save()
        finally:
            bar.close()
        result.steps, result.epochs, result.samples = state.step, state.epoch, state.samples
        result.seconds = time.perf_counter() - started
        result.last_loss, result.skipped = state.last_loss, step.skipped
        for hook in overridden(callbacks, "on_fit_end"):
            hook(state, result)
        return result


def _check_args(recipe: Any, max_steps: Any, epochs: Any, checkpoint_every: Any, log_every: Any, eval_every: Any,
                callbacks: Any) -> None:
    if not isinstance(recipe, Recipe):
        raise TypeError(f"fit: recipe must be a pitstop Recipe, got {type(recipe).__name__}")
    for name, value, low in (("max_steps", max_steps, 1), ("epochs", epochs, 1), ("checkpoint_every", checkpoint_every, 1),
                             ("log_every", log_every, 1), ("eval_every", eval_every, 1)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
            raise ValueError(f"fit: {name} must be an int >= {low} or None, got {value!r}")
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"fit: callbacks must be pitstop.engine.Callback instances, got {cb!r}")


def _scheduler(scheduler: Any, old: torch.optim.Optimizer, new: torch.optim.Optimizer) -> Any:
    if scheduler is None:
        return None
    if isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler) or hasattr(scheduler, "state_dict"):
        if new is not old and getattr(scheduler, "optimizer", None) is old:
            raise ValueError("fit: Recipe.optimizer_impl rebuilt the optimizer, but the scheduler was built on the "
                             "old one; pass scheduler=lambda opt: YourScheduler(opt, ...) instead")
        return scheduler
    if callable(scheduler):
        return scheduler(new)
    raise TypeError(f"fit: scheduler must be an LR scheduler or a callable optimizer -> scheduler, got {scheduler!r}")


def _total_steps(loader: Any, recipe: Recipe, max_steps: int | None, epochs: int | None) -> int | None:
    per_epoch = -(-len(loader) // recipe.accumulate) if hasattr(loader, "__len__") else None
    by_epochs = epochs * per_epoch if epochs is not None and per_epoch is not None else None
    options = [v for v in (max_steps, by_epochs) if v is not None]
    return min(options) if options else None


def _set_own_rng(states: list[Any], info: Any) -> None:
    set_rng_state(states[info.rank if len(states) > info.rank else 0])


def _epoch_rng(loader: Any) -> dict[str, Any]:
    """Every RNG state that decides an epoch's data order and in-process augmentations."""
    gens = {}
    for name, gen in (("loader", getattr(loader, "generator", None)),
                      ("sampler", getattr(getattr(loader, "sampler", None), "generator", None))):
        if isinstance(gen, torch.Generator):
            gens[name] = gen.get_state()
    return {"global": rng_state(), "generators": gens}


def _set_epoch_rng(states: list[Any], loader: Any, info: Any) -> None:
    own = states[info.rank if len(states) > info.rank else 0]
    set_rng_state(own["global"])
    for name, gen in (("loader", getattr(loader, "generator", None)),
                      ("sampler", getattr(getattr(loader, "sampler", None), "generator", None))):
        if isinstance(gen, torch.Generator) and name in own["generators"]:
            gen.set_state(own["generators"][name].cpu())


def _state(step: Any, sched: Any, state: FitState, recipe: Recipe, rngs: list[Any], epoch_rng: list[Any],
           info: Any) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "model": step.model.state_dict(),
        "optimizer": step.optimizer.state_dict(),
        "step_state": step.state_dict(),
        "scheduler": sched.state_dict() if sched is not None else None,
        "step": state.step,
        "epoch": state.epoch,
        "pos": state.pos,
        "samples": state.samples,
        "rng": rngs,
        "epoch_rng": epoch_rng,
        "recipe": recipe.to_dict(),
        "world_size": info.world_size,
    }


def _restore(ckpt: dict[str, Any], step: Any, sched: Any, state: FitState, recipe: Recipe,
             info: Any) -> tuple[list[Any], list[Any]]:
    if ckpt.get("format") != FORMAT:
        raise ValueError(f"checkpoint format {ckpt.get('format')!r} is not {FORMAT} (written by another pitstop)")
    saved = ckpt.get("recipe", {})
    changed = sorted(k for k, v in recipe.to_dict().items() if k in saved and saved[k] != v)
    if changed:
        warnings.warn(f"resuming with a recipe that differs from the checkpoint's in {', '.join(changed)}: "
                      "the run will not match an uninterrupted one exactly", UserWarning, stacklevel=3)
    if ckpt.get("world_size", 1) != info.world_size:
        warnings.warn(f"checkpoint written with {ckpt.get('world_size')} processes, resuming with "
                      f"{info.world_size}: data order and RNG streams differ", UserWarning, stacklevel=3)
    step.model.load_state_dict(ckpt["model"])
    step.optimizer.load_state_dict(ckpt["optimizer"])
    step.load_state_dict(ckpt.get("step_state", {}))
    if sched is not None and ckpt.get("scheduler") is not None:
        sched.load_state_dict(ckpt["scheduler"])
    state.step, state.epoch, state.pos, state.samples = ckpt["step"], ckpt["epoch"], ckpt["pos"], ckpt["samples"]
    return ckpt["epoch_rng"], ckpt["rng"]
