"""The engine (face E): a lean, correct training step and loop that apply a :class:`Recipe`.

Modules: ``recipe`` (the frozen :class:`Recipe`, torch-free), ``precision`` (precision
plugins), ``prepare`` (channels_last, activation checkpointing, optimizer implementation),
``step`` (:func:`make_step`), ``loop`` (:func:`fit`), ``resume`` (what a ``fit`` checkpoint
holds and exact resume), ``data`` (loaders, device moves, CUDA
prefetcher, micro-batch groups), ``checkpoint`` (atomic, weights-only checkpoints),
``distributed`` (torch.distributed + DDP under torchrun), ``monitor`` (logging, evaluation),
``callbacks``, ``profile`` (:class:`ProfileSteps`, a profiler window over optimizer steps),
``phase_memory`` (:class:`PhaseMemory`, peak memory per phase of chosen steps).

This package is imported by torch-free code (``pitstop.tune`` parses recipes), so it resolves
its torch-backed names lazily, like the top-level ``pitstop`` package.
"""

from __future__ import annotations

from pitstop._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "Recipe": "pitstop.engine.recipe",
    "RecipeError": "pitstop.engine.recipe",
    "make_step": "pitstop.engine.step",
    "Step": "pitstop.engine.step",
    "LossError": "pitstop.engine.step",
    "fit": "pitstop.engine.loop",
    "Callback": "pitstop.engine.callbacks",
    "FitState": "pitstop.engine.callbacks",
    "FitResult": "pitstop.engine.callbacks",
    "NonFiniteLossError": "pitstop.engine.callbacks",
    "save_checkpoint": "pitstop.engine.checkpoint",
    "load_checkpoint": "pitstop.engine.checkpoint",
    "load_latest": "pitstop.engine.checkpoint",
    "latest_checkpoint": "pitstop.engine.checkpoint",
    "CheckpointError": "pitstop.engine.checkpoint",
    "CorruptCheckpointError": "pitstop.engine.checkpoint",
    "CheckpointDirError": "pitstop.engine.ckptdir",
    "CheckpointDirLocked": "pitstop.engine.ckptdir",
    "make_loader": "pitstop.engine.data",
    "init_distributed": "pitstop.engine.distributed",
    "switch_optimizer_impl": "pitstop.engine.prepare",
    "ProfileSteps": "pitstop.engine.profile",
    "PhaseMemory": "pitstop.engine.phase_memory",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
