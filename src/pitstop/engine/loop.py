"""``fit``: the training loop around :func:`make_step`, read top to bottom.

``fit`` is the loop itself, in the order it runs: set-up, resume, then per epoch the
epoch start (sampler shuffle, RNG record or replay) and per micro-batch: take the next
batch (on CUDA, already copied by the prefetcher), run the step (forward and backward,
under DDP ``no_sync`` unless it is the group's last micro-batch, then the optimizer step),
append the detached loss to a list; after each optimizer step: scheduler, callbacks, and
every interval log, eval, checkpoint. The pieces that are not the loop are in
:class:`_Run` (the loop's state and its log/eval/checkpoint/epoch helpers) and in
:mod:`pitstop.engine.resume` (checkpoint contents, exact resume and its RNG handling).

Everything that reads device values (logging, NaN checks, evaluation, checkpoints) happens
once per interval; a ``# SYNC`` comment marks every host-device sync the loop causes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pitstop.engine.callbacks import Callback, FitResult, FitState, overridden
from pitstop.engine.checkpoint import checkpoint_path, load_latest, rng_state, save_checkpoint
from pitstop.engine.ckptdir import Manifest, check_keep, new_run_id, open_checkpoint_dir
from pitstop.engine.data import adapt_loader, device_batches, micro_batches, move_batch
from pitstop.engine.distributed import DistInfo, all_gather_objects, dist_info
from pitstop.engine.monitor import LossLog, Progress, evaluate
from pitstop.engine.recipe import Recipe
from pitstop.engine.resume import checkpoint_state, epoch_rng, restore, set_epoch_rng, set_own_rng
from pitstop.engine.step import LossFn, Step, make_step

__all__ = ["fit"]


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
    writes; the directory is checked and locked before the first step; the ``keep_checkpoints``
    (>= 1, or None: all) most recent of this run are kept, other runs' files are never touched);
    with ``resume`` the newest good one of the directory's current run is loaded first.
    ``scheduler``: an LR scheduler stepped after every optimizer step, or a
    callable ``optimizer -> scheduler`` (needed when ``recipe.optimizer_impl`` rebuilds the
    optimizer). Losses are read on the host once every ``log_every`` steps. ``progress``: a
    rich bar (default: when stderr is a terminal).
    """
    callbacks = list(callbacks)  # once: a generator would be used up by the checks below
    _check_args(recipe, max_steps, epochs, checkpoint_every, log_every, eval_every, callbacks)
    check_keep(keep_checkpoints)
    if max_steps is None and epochs is None:
        epochs = 1
    info = dist_info()
    if recipe.seed is not None:
        from pitstop.helpers.seed import seed_everything

        seed_everything(recipe.seed)
    started = time.perf_counter()
    # -- set-up: checkpoint_dir checked and locked (rank 0) before anything is trained; make_step
    # moves the model, converts/wraps/compiles it and may rebuild the optimizer
    with open_checkpoint_dir(checkpoint_dir, writer=info.is_main) as checkpoint_dir, \
            make_step(model, optimizer, loss_fn, recipe) as step:
        sched = _scheduler(scheduler, optimizer, step.optimizer)
        loader = adapt_loader(train_loader, recipe, device=step.device, dist=info)
        step.model.train()
        run = _Run(step, sched, loader, recipe, info, callbacks, loss_fn=loss_fn, eval_loader=eval_loader,
                   eval_fn=eval_fn, checkpoint_dir=checkpoint_dir, keep_checkpoints=keep_checkpoints)
        state, result, losses, on_step = run.state, run.result, run.losses, run.hooks["on_step_end"]

        # -- resume: the newest good checkpoint restores model, optimizer, scheduler and position
        resume_rng = run.resume() if checkpoint_dir is not None and resume else None
        run.start(progress, _total_steps(loader, recipe, max_steps, epochs))
        for hook in run.hooks["on_fit_start"]:
            hook(state)

        done = max_steps is not None and state.step >= max_steps
        try:
            while not done and (epochs is None or state.epoch < epochs):
                # -- epoch start: new shuffle, RNG states recorded (or replayed), used batches skipped
                batches = run.begin_epoch(resume_rng)
                resume_rng = None
                start_pos = state.pos
                # fetch: on CUDA the prefetcher copies the next batch on a side stream (no sync)
                for batch, weight, boundary, n in device_batches(micro_batches(batches, recipe.accumulate),
                                                                  step.device, recipe):
                    # forward + backward of one micro-batch (under DDP no_sync() unless boundary, so
                    # gradients are all-reduced once per group); at the boundary the optimizer steps.
                    # No host sync, except GradScaler's own (fp16) and skip_nonfinite's (opt-in).
                    loss = step.run(batch, weight=weight, boundary=boundary)
                    losses.add(loss, state.step + 1)  # the detached loss stays on the device
                    state.pos += 1
                    state.samples += n
                    if not boundary:
                        continue
                    # -- after an optimizer step
                    state.step += 1
                    if sched is not None:
                        sched.step()
                    for hook in on_step:
                        hook(state, loss)  # loss is a device tensor: a hook reading it syncs
                    if state.step % log_every == 0:
                        run.log()  # SYNC: the interval's losses are read on the host
                    if eval_loader is not None and eval_every and state.step % eval_every == 0:
                        run.evaluate()  # SYNC: the eval metrics are read on the host
                    if checkpoint_dir is not None and checkpoint_every and state.step % checkpoint_every == 0:
                        run.checkpoint()  # SYNC: log, a collective, state dicts written to disk
                    if max_steps is not None and state.step >= max_steps:
                        done = True
                        break
                else:
                    run.end_epoch(start_pos)
                    if eval_loader is not None and not eval_every:
                        run.evaluate()  # SYNC: the eval metrics are read on the host

            # -- the end: the last partial log interval, a final eval and checkpoint unless just done
            if losses.losses:
                run.log()  # SYNC
            if eval_loader is not None and (not result.evals or result.evals[-1][0] != state.step):
                run.evaluate()  # SYNC
            if checkpoint_dir is not None and run.saved != state.step:
                run.checkpoint()  # SYNC
        except BaseException as exc:
            for hook in run.hooks["on_exception"]:
                hook(state, exc)  # callbacks release hooks/profilers; the error goes on to the caller
            raise
        finally:
            run.bar.close()
        result.steps, result.epochs, result.samples = state.step, state.epoch, state.samples
        result.seconds = time.perf_counter() - started
        result.last_loss, result.skipped = state.last_loss, step.skipped
        for hook in run.hooks["on_fit_end"]:
            hook(state, result)
        return result


_HOOKS = ("on_fit_start", "on_step_end", "on_log", "on_eval", "on_checkpoint", "on_fit_end", "on_exception")


class _Run:
    """The state of one ``fit`` call and the pieces of its loop that are not the hot path:
    resume, epoch start/end, log, eval and checkpoint."""

    def __init__(self, step: Step, sched: Any, loader: Iterable, recipe: Recipe, info: DistInfo,
                 callbacks: list[Callback], *, loss_fn: LossFn, eval_loader: Iterable | None,
                 eval_fn: Callable[[nn.Module, Any], Any] | None, checkpoint_dir: str | Path | None,
                 keep_checkpoints: int | None):
        self.step, self.sched, self.loader, self.recipe, self.info = step, sched, loader, recipe, info
        self.loss_fn, self.eval_loader, self.eval_fn = loss_fn, eval_loader, eval_fn
        self.checkpoint_dir, self.keep_checkpoints = checkpoint_dir, keep_checkpoints
        self.state = FitState(model=step.model, train_model=step.train_model, runner=step, optimizer=step.optimizer,
                              scheduler=sched, recipe=recipe, rank=info.rank, world_size=info.world_size)
        self.result = FitResult(steps=0, epochs=0, samples=0, seconds=0.0, last_loss=None)
        self.hooks = {name: overridden(callbacks, name) for name in _HOOKS}  # unused hooks cost nothing
        self.move: Callable[[Any], Any] | None = None  # eval batches to the device / channels_last
        if step.device.type != "cpu" or recipe.channels_last:
            def move(b: Any) -> Any:
                return move_batch(b, step.device, recipe.non_blocking, recipe.channels_last)
            self.move = move
        self.losses = LossLog(recipe.skip_nonfinite)
        self.saved = -1  # step of the last checkpoint (the same on every rank)
        self.run_id = new_run_id()  # checkpoints pruned are this run's only (a resume continues its run)
        self.epoch_rngs: list[Any] = []  # every rank's RNG states at the start of this epoch

    def resume(self) -> tuple[list[Any], list[Any]] | None:
        """Load the newest good checkpoint of ``checkpoint_dir``, if any. Returns the
        ``(epoch_rng, rng)`` states the next epoch start replays, or None."""
        manifest = Manifest(self.checkpoint_dir)  # the current run's files, not another run's higher steps
        own = manifest.files(manifest.current) if manifest.current is not None else []
        # SYNC: disk read onto the device
        found = load_latest(self.checkpoint_dir, map_location=self.step.device, candidates=own or None)
        if self.step.shard_plan is not None:  # FSDP2: every rank must load the same shards (a collective)
            names = all_gather_objects(found[0].name if found is not None else None, self.info)
            if len(set(names)) > 1:
                from pitstop.engine.checkpoint import CheckpointError

                raise CheckpointError(f"{self.checkpoint_dir}: the ranks found different checkpoints to resume from "
                                      f"({', '.join(f'rank {r}: {n}' for r, n in enumerate(names))}); is the "
                                      "directory the same on every node?")
        if found is None:
            return None
        self.result.resumed_from, ckpt = found
        del found
        run = ckpt.get("run")
        self.run_id = run if isinstance(run, str) else manifest.run_of(self.result.resumed_from.name) or self.run_id
        # stacklevel 4: a warning names the line calling fit (restore <- resume <- fit <- caller)
        resume_rng = restore(ckpt, self.step, self.sched, self.state, self.recipe, self.info, stacklevel=4,
                             directory=Path(self.checkpoint_dir))
        del ckpt  # drop the loaded copy: the model and optimizer hold their own (PIT404)
        if self.state.pos == 0:  # saved between epochs: the next epoch starts from here
            set_own_rng(resume_rng[1], self.info)
            return None
        return resume_rng

    def start(self, progress: bool | None, total: int | None) -> None:
        """The progress bar and the throughput clock, started after set-up and resume."""
        self.bar = Progress(progress, total, self.info.rank)
        self._last_time, self._last_samples = time.perf_counter(), self.state.samples

    def begin_epoch(self, resume_rng: tuple[list[Any], list[Any]] | None) -> Iterator[Any]:
        """The iterator of this epoch's batches: the sampler's new shuffle (PIT703), the
        epoch-start RNG states recorded for checkpoints (or, when resuming, replayed), the
        batches the checkpointed run had used skipped, then its RNG states put back."""
        loader, state, info = self.loader, self.state, self.info
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(state.epoch)  # PIT703: a new shuffle per epoch
        if resume_rng is not None:  # replay the interrupted epoch's start
            self.epoch_rngs = resume_rng[0]
            set_epoch_rng(self.epoch_rngs, loader, info)
        elif self.checkpoint_dir is not None:
            self.epoch_rngs = all_gather_objects(epoch_rng(loader), info)  # collective: every rank's RNG
        else:
            self.epoch_rngs = []
        batches = iter(loader)
        sized = hasattr(loader, "__len__")
        if state.pos and not (sized and state.pos >= len(loader)):
            for _ in range(state.pos):  # the batches the checkpointed run had used
                next(batches, None)
        if resume_rng is not None:
            set_own_rng(resume_rng[1], info)
            if sized and state.pos >= len(loader):
                batches = iter(())
        return batches

    def end_epoch(self, start_pos: int) -> None:
        """The loader is exhausted: count the epoch (an epoch without a batch is an error)."""
        if self.state.pos == 0 and start_pos == 0:
            raise ValueError(f"fit: train_loader yielded no batches in epoch {self.state.epoch} "
                             "(an exhausted iterator or an empty dataset?)")
        self.state.epoch += 1
        self.state.pos = 0

    def log(self) -> None:
        """One history record for the interval (mean loss, throughput, lr); ``on_log`` hooks."""
        if not self.losses.losses:
            return
        state, info = self.state, self.info
        # SYNC: the interval's losses read on the host at once (and all-reduced under DDP);
        # raises NonFiniteLossError on inf/NaN unless skip_nonfinite
        state.last_loss = self.losses.read(info, state.epoch)
        now = time.perf_counter()
        rate = (state.samples - self._last_samples) * info.world_size / max(now - self._last_time, 1e-9)
        self._last_time, self._last_samples = now, state.samples
        record = {"step": state.step, "epoch": state.epoch, "loss": state.last_loss, "samples_per_s": rate,
                  "lr": self.step.optimizer.param_groups[0]["lr"]}
        self.result.history.append(record)
        self.bar.update(state.step, record)
        for hook in self.hooks["on_log"]:
            hook(state, record)

    def evaluate(self) -> None:
        """A pass over ``eval_loader`` in eval mode; ``on_eval`` hooks."""
        # SYNC: one read of the summed metrics at the end of the pass
        metrics = evaluate(self.step.model, self.eval_loader, self.eval_fn or self.loss_fn,
                           forward_context=self.step.forward_context, move=self.move)
        self.state.last_eval = metrics
        self.result.evals.append((self.state.step, metrics))
        for hook in self.hooks["on_eval"]:
            hook(self.state, metrics)

    def checkpoint(self) -> None:
        """Write a checkpoint (rank 0, atomically); ``on_checkpoint`` hooks on rank 0."""
        state, info = self.state, self.info
        self.saved = state.step
        self.log()  # SYNC: never write a checkpoint after an unnoticed inf/NaN
        rngs = all_gather_objects(rng_state(), info)  # collective: every rank's RNG
        path = checkpoint_path(self.checkpoint_dir, state.step)
        sharded = None
        if self.step.shard_plan is not None:  # FSDP2: every rank writes its shards first (collective)
            from pitstop.engine.shard_ckpt import save_sharded

            sharded = save_sharded(self.step.model, self.step.optimizer, path.parent, path.name, is_main=info.is_main)
        if info.is_main:
            # SYNC: torch.save copies the state dicts to the host; the file is written atomically
            ckpt = checkpoint_state(self.step, self.sched, state, self.recipe, rngs, self.epoch_rngs, info, sharded)
            ckpt["run"] = self.run_id
            path = save_checkpoint(ckpt, path, keep=self.keep_checkpoints, run=self.run_id)
            del ckpt
            self.result.checkpoint = path
            for hook in self.hooks["on_checkpoint"]:
                hook(state, path)
        if sharded is not None:  # FSDP2: no rank goes on (to a resume, say) before the .pt naming the shards exists
            import torch.distributed as dist

            dist.barrier()


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
