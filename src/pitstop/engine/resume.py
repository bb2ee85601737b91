"""What :func:`pitstop.fit` puts in a checkpoint and how it gets it back: exact resume.

At the start of each epoch the loop records every RNG state (and the loader's generators)
with :func:`epoch_rng`; a checkpoint (:func:`checkpoint_state`) stores them with the
position in the epoch and the RNG states at the checkpoint. Resuming (:func:`restore`)
loads the model, optimizer, step and scheduler states; the loop then restores the
epoch-start states (:func:`set_epoch_rng`), re-creates the loader's iterator (same
shuffle), skips the batches already used (so in-process data randomness is replayed), and
restores the checkpoint-time RNG states (:func:`set_own_rng`): the run continues as if
never interrupted (bitwise on CPU; tested with a seeded shuffling loader and
``num_workers=0``). Limits: on CUDA the prefetcher has already drawn the next batch when a
checkpoint is taken, so data randomness drawn in the training process (``num_workers=0``)
is replayed one batch off; with ``persistent_workers`` the workers' own RNG streams restart
on resume.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from pitstop.engine.callbacks import FitState
from pitstop.engine.checkpoint import rng_state, set_rng_state
from pitstop.engine.distributed import DistInfo
from pitstop.engine.recipe import Recipe

__all__ = ["FORMAT", "checkpoint_state", "restore", "epoch_rng", "set_epoch_rng", "set_own_rng"]

FORMAT = 1


def checkpoint_state(step: Any, sched: Any, state: FitState, recipe: Recipe, rngs: list[Any], epoch_rngs: list[Any],
                     info: DistInfo, sharded: str | None = None) -> dict[str, Any]:
    """The checkpoint ``fit`` writes: ``rngs`` are every rank's RNG states now, ``epoch_rngs``
    every rank's :func:`epoch_rng` at the start of the current epoch. ``sharded``: the name of
    the directory holding the model and optimizer (FSDP2, :mod:`pitstop.engine.shard_ckpt`),
    which the file then names instead of holding them."""
    parts = ({"sharded": sharded} if sharded is not None else
             {"model": step.model.state_dict(), "optimizer": step.optimizer.state_dict()})
    return {
        "format": FORMAT,
        **parts,
        "step_state": step.state_dict(),
        "scheduler": sched.state_dict() if sched is not None else None,
        "step": state.step,
        "epoch": state.epoch,
        "pos": state.pos,
        "samples": state.samples,
        "rng": rngs,
        "epoch_rng": epoch_rngs,
        "recipe": recipe.to_dict(),
        "world_size": info.world_size,
    }


def restore(ckpt: dict[str, Any], step: Any, sched: Any, state: FitState, recipe: Recipe,
            info: DistInfo, *, stacklevel: int = 2, directory: Path | None = None) -> tuple[list[Any], list[Any]]:
    """Load ``ckpt`` into the step, its optimizer, the scheduler and ``state``; return its
    ``(epoch_rng, rng)`` lists for the loop to replay. Warns (at ``stacklevel``) when the
    recipe or the number of processes changed. ``directory``: where a sharded checkpoint's
    model and optimizer part is (every rank loads its slices; a collective)."""
    if ckpt.get("format") != FORMAT:
        raise ValueError(f"checkpoint format {ckpt.get('format')!r} is not {FORMAT} (written by another pitstop)")
    saved = ckpt.get("recipe", {})
    changed = sorted(k for k, v in recipe.to_dict().items() if k in saved and saved[k] != v)
    if changed:
        warnings.warn(f"resuming with a recipe that differs from the checkpoint's in {', '.join(changed)}: "
                      "the run will not match an uninterrupted one exactly", UserWarning, stacklevel=stacklevel)
    if ckpt.get("world_size", 1) != info.world_size:
        warnings.warn(f"checkpoint written with {ckpt.get('world_size')} processes, resuming with "
                      f"{info.world_size}: data order and RNG streams differ", UserWarning, stacklevel=stacklevel)
    _load_model_optimizer(ckpt, step, directory)
    step.load_state_dict(ckpt.get("step_state", {}))
    if sched is not None and ckpt.get("scheduler") is not None:
        sched.load_state_dict(ckpt["scheduler"])
    state.step, state.epoch, state.pos, state.samples = ckpt["step"], ckpt["epoch"], ckpt["pos"], ckpt["samples"]
    return ckpt["epoch_rng"], ckpt["rng"]


def _load_model_optimizer(ckpt: dict[str, Any], step: Any, directory: Path | None) -> None:
    from pitstop.engine.checkpoint import CheckpointError

    sharded_run = getattr(step, "shard_plan", None) is not None
    if isinstance(ckpt.get("sharded"), str):
        if not sharded_run or directory is None:
            raise CheckpointError(f"the checkpoint is sharded ({ckpt['sharded']}): resume it with "
                                  "Recipe(strategy='fsdp2') under torchrun")
        from pitstop.engine.shard_ckpt import load_sharded

        load_sharded(step.model, step.optimizer, Path(directory) / ckpt["sharded"])
        return
    if sharded_run:
        raise CheckpointError("the checkpoint holds a whole (unsharded) model: Recipe(strategy='fsdp2') resumes "
                              "only its own sharded checkpoints")
    step.model.load_state_dict(ckpt["model"])
    step.optimizer.load_state_dict(ckpt["optimizer"])


def _loader_generators(loader: Any) -> tuple[tuple[str, Any], ...]:
    return (("loader", getattr(loader, "generator", None)),
            ("sampler", getattr(getattr(loader, "sampler", None), "generator", None)))


def epoch_rng(loader: Any) -> dict[str, Any]:
    """Every RNG state that decides an epoch's data order and in-process augmentations."""
    gens = {}
    for name, gen in _loader_generators(loader):
        if isinstance(gen, torch.Generator):
            gens[name] = gen.get_state()
    return {"global": rng_state(), "generators": gens}


def set_epoch_rng(states: list[Any], loader: Any, info: DistInfo) -> None:
    """Put back this rank's :func:`epoch_rng` from the per-rank list ``states``."""
    own = states[info.rank if len(states) > info.rank else 0]
    set_rng_state(own["global"])
    for name, gen in _loader_generators(loader):
        if isinstance(gen, torch.Generator) and name in own["generators"]:
            gen.set_state(own["generators"][name].cpu())


def set_own_rng(states: list[Any], info: DistInfo) -> None:
    """Put back this rank's RNG states from the per-rank list ``states`` (rank 0's when the
    checkpoint was written by fewer processes)."""
    set_rng_state(states[info.rank if len(states) > info.rank else 0])
