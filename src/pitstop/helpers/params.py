"""Parameter helpers: counting, freezing, and weight-decay groups (PIT502, PIT503)."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

__all__ = ["count_params", "freeze", "unfreeze", "param_groups", "NORM_TYPES"]

#: Modules whose weights are scales/shifts, not projections: no weight decay (PIT502).
NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._NormBase,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.LocalResponseNorm,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)


def count_params(model: nn.Module, trainable: bool | None = None) -> int:
    """Number of parameters (shared ones counted once).

    ``trainable=True`` counts only ``requires_grad`` ones, ``False`` only frozen ones,
    ``None`` all of them.
    """
    return sum(
        p.numel() for p in model.parameters() if trainable is None or p.requires_grad == trainable
    )


def _set_requires_grad(modules: Iterable[nn.Module], flag: bool) -> None:
    for module in modules:
        for p in module.parameters():
            p.requires_grad_(flag)


def freeze(*modules: nn.Module) -> None:
    """Stop gradients for every parameter of ``modules`` (PIT503).

    Build the optimizer from trainable parameters only, e.g. with :func:`param_groups`,
    which skips frozen ones: an optimizer holding frozen params wastes state and time.
    BatchNorm running statistics still update in ``train()`` mode; call ``.eval()`` on
    a frozen BN module if they must stay fixed.
    """
    _set_requires_grad(modules, False)


def unfreeze(*modules: nn.Module) -> None:
    """Undo :func:`freeze`."""
    _set_requires_grad(modules, True)


def param_groups(model: nn.Module, weight_decay: float, *, skip: Iterable[str] = ()) -> list[dict]:
    """Two optimizer groups: decay for weights of projections, none for biases and norms.

    Biases, every parameter of a normalization layer, embeddings' 1-D parameters and the
    names in ``skip`` go to the ``weight_decay=0.0`` group (PIT502). Frozen parameters are
    left out altogether (PIT503). Shared parameters appear once.

        opt = torch.optim.AdamW(pitstop.param_groups(model, 0.1), lr=3e-4)
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    skip = set(skip)
    decay, no_decay, seen = [], [], set()
    for mod_name, module in model.named_modules():
        is_norm = isinstance(module, NORM_TYPES)
        for p_name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            if is_norm or p.ndim <= 1 or p_name == "bias" or full in skip:
                no_decay.append(p)
            else:
                decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
