"""Looking inside a model: intermediate activations and gradients."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["capture", "retain_grads"]


def _modules(model: nn.Module, names: Sequence[str]) -> dict[str, nn.Module]:
    available = dict(model.named_modules())
    missing = [n for n in names if n not in available]
    if missing:
        raise KeyError(f"no submodule(s) {missing}; available: {', '.join(n for n in available if n)[:300]}")
    return {n: available[n] for n in names}


@contextmanager
def capture(model: nn.Module, layer_names: Sequence[str], detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
    """Record the outputs of named submodules during forward passes inside the block.

        with pitstop.capture(model, ["features.3", "fc"]) as acts:
            model(x)
        acts["fc"].shape

    The latest output of each layer is kept (detached unless ``detach=False``). Hooks are
    removed on exit, even on error.
    """
    out: dict[str, torch.Tensor] = {}

    def hook_for(name: str):
        def hook(_module, _inputs, output):
            out[name] = output.detach() if detach and isinstance(output, torch.Tensor) else output
        return hook

    with _forward_hooks(model, layer_names, hook_for):
        yield out


@contextmanager
def retain_grads(model: nn.Module, layer_names: Sequence[str]) -> Iterator[dict[str, torch.Tensor]]:
    """Keep the gradients of named submodules' outputs (non-leaf tensors) after backward.

        with pitstop.retain_grads(model, ["features.3"]) as grads:
            model(x).sum().backward()
        grads["features.3"]  # d loss / d output of features.3

    Non-leaf gradients are normally freed to save memory (seed 002 shows
    ``tensor.retain_grad()``); this records, through a tensor hook, the gradient flowing
    into each chosen output only. The dict is filled as backward reaches each layer.
    """
    grads: dict[str, torch.Tensor] = {}

    def hook_for(name: str):
        def hook(_module, _inputs, output):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda g: grads.__setitem__(name, g.detach()))
        return hook

    with _forward_hooks(model, layer_names, hook_for):
        yield grads


@contextmanager
def _forward_hooks(model: nn.Module, layer_names: Sequence[str], hook_for: Callable[[str], Callable]) -> Iterator[None]:
    """A forward hook ``hook_for(name)`` on each named submodule, removed on exit (even on error)."""
    handles = [m.register_forward_hook(hook_for(n)) for n, m in _modules(model, layer_names).items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
