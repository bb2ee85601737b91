"""Applying a recipe to the model and the optimizer, once, before training starts.

- ``checkpoint_activations``: the named submodules' ``forward`` runs under
  ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` while training (PIT401).
  The forward is replaced on the instance, so ``state_dict`` keys do not change.
- ``channels_last``: ``model.to(memory_format=torch.channels_last)`` (PIT104).
- ``optimizer_impl``: :func:`switch_optimizer_impl` (PIT501).
- ``compile``: ``torch.compile(module, mode=...)`` (PIT601).
"""

from __future__ import annotations

import fnmatch
import inspect
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "apply_activation_checkpointing",
    "remove_activation_checkpointing",
    "switch_optimizer_impl",
    "optimizer_impl_of",
]

_FLAGS = {
    "fused": {"fused": True, "foreach": None},
    "foreach": {"foreach": True, "fused": None},
    "for-loop": {"foreach": False, "fused": None},
}


def apply_activation_checkpointing(model: nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Recompute the forward of every submodule whose qualified name matches one of
    ``patterns`` (``fnmatch``: ``"blocks.*"``) during backward. Returns the names wrapped.

    Only while ``module.training`` and grad mode is on; in eval or inference the module runs
    as usual. Raises ``ValueError`` naming a pattern that matches nothing.
    """
    modules = dict(model.named_modules())
    chosen: list[str] = []
    for pattern in patterns:
        hits = [n for n in modules if n and fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            sample = ", ".join(n for n in list(modules)[1:9] if n)
            raise ValueError(f"Recipe.checkpoint_activations: {pattern!r} matches no submodule of "
                             f"{type(model).__name__} (names look like: {sample})")
        chosen += [h for h in hits if h not in chosen]
    # a module inside an already wrapped one is recomputed anyway: wrap the outermost only
    outer = [n for n in chosen if not any(n.startswith(o + ".") for o in chosen if o != n)]
    for name in outer:
        module = modules[name]
        if getattr(module, "_pitstop_checkpointed", False):
            continue
        original = module.forward

        def forward(*args: Any, _original=original, _module=module, **kwargs: Any) -> Any:
            if _module.training and torch.is_grad_enabled():
                return checkpoint(_original, *args, use_reentrant=False, **kwargs)
            return _original(*args, **kwargs)

        module.forward = forward
        module._pitstop_checkpointed = True
    return outer


def remove_activation_checkpointing(model: nn.Module) -> None:
    """Undo :func:`apply_activation_checkpointing`."""
    for module in model.modules():
        if getattr(module, "_pitstop_checkpointed", False):
            del module.forward
            del module._pitstop_checkpointed


def optimizer_impl_of(optimizer: torch.optim.Optimizer) -> str:
    """``"fused"``, ``"foreach"``, ``"for-loop"`` as set in the param groups, or
    ``"default"`` when neither flag is set (torch then picks foreach on CUDA, the for-loop
    on CPU)."""
    group = optimizer.param_groups[0]
    if group.get("fused"):
        return "fused"
    if group.get("foreach"):
        return "foreach"
    if group.get("foreach") is False:
        return "for-loop"
    return "default"


def switch_optimizer_impl(optimizer: torch.optim.Optimizer, impl: str | None) -> torch.optim.Optimizer:
    """Return an optimizer of the same class running ``impl`` (``"fused"`` | ``"foreach"`` |
    ``"for-loop"``), with the same parameter groups, hyper-parameters and state.

    How: the optimizer is rebuilt as ``type(opt)(groups, **defaults)`` with the flags set in
    every group (so its constructor checks them: ``fused`` raises for unsupported dtypes or
    ``differentiable=True``), then ``load_state_dict(opt.state_dict())`` carries the state
    over, with the new flags written into the saved groups first (``load_state_dict``
    restores the groups' flags, and places Adam's ``step`` counters where the flagged
    implementation wants them). The state tensors are shared with the old optimizer: stop
    using it, and build a learning-rate scheduler on the returned one.
    ``None``, or an optimizer already running ``impl``, is returned as is.
    """
    if impl is None or optimizer_impl_of(optimizer) == impl:
        return optimizer
    cls = type(optimizer)
    flags = _FLAGS[impl]
    accepted = inspect.signature(cls.__init__).parameters
    missing = [k for k, v in flags.items() if v is not None and k not in accepted]
    if missing:
        raise ValueError(f"Recipe.optimizer_impl={impl!r}: {cls.__module__}.{cls.__name__} has no "
                         f"{missing[0]!r} argument (fused exists for Adam, AdamW, SGD and Adagrad)")
    flags = {k: v for k, v in flags.items() if k in accepted}
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    defaults.update(flags)
    groups = [{**{k: v for k, v in g.items() if k != "params"}, **flags, "params": g["params"]}
              for g in optimizer.param_groups]
    try:
        new = cls(groups, **defaults)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ValueError(f"Recipe.optimizer_impl={impl!r} cannot be used with this {cls.__name__}: {exc}") from exc
    state = optimizer.state_dict()
    for group in state["param_groups"]:
        group.update(flags)  # so that load_state_dict places Adam's `step` as `impl` wants it
    new.load_state_dict(state)
    return new
