"""pitstop: a pit crew for PyTorch training.

The top-level package imports nothing heavy: names that need torch are resolved lazily on
first access (PEP 562), so ``pitstop lint`` starts fast and works where torch is absent.
"""

from __future__ import annotations

from pitstop._lazy import lazy_exports

__version__ = "0.1.0"

# Public name -> module that defines it. Torch is imported only when one of them is used.
_LAZY: dict[str, str] = {
    # helpers (face H)
    "count_params": "pitstop.helpers.params",
    "freeze": "pitstop.helpers.params",
    "unfreeze": "pitstop.helpers.params",
    "param_groups": "pitstop.helpers.params",
    "replace_head": "pitstop.helpers.heads",
    "drop_head": "pitstop.helpers.heads",
    "init_weights": "pitstop.helpers.init",
    "tta": "pitstop.helpers.inference",
    "fuse_for_inference": "pitstop.helpers.fuse",
    "split": "pitstop.helpers.data",
    "capture": "pitstop.helpers.inspect",
    "retain_grads": "pitstop.helpers.inspect",
    "seed_everything": "pitstop.helpers.seed",
    # engine (face E)
    "Recipe": "pitstop.engine.recipe",
    "make_step": "pitstop.engine.step",
    "fit": "pitstop.engine.loop",
    "save_checkpoint": "pitstop.engine.checkpoint",
    "load_checkpoint": "pitstop.engine.checkpoint",
    "latest_checkpoint": "pitstop.engine.checkpoint",
    "PhaseMemory": "pitstop.engine.phase_memory",
    # lint (face L; torch-free)
    "lint_source": "pitstop.lint.runner",
    "fix_source": "pitstop.lint.runner",
    # doctor (face D): pitstop.doctor(step_fn, ...); the package itself is callable
    "doctor": "pitstop.doctor",
    # tune (face K): the package is callable, pitstop.tune(model, optimizer_factory, loss_fn, loader)
    "tune": "pitstop.tune",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
