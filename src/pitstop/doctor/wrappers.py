"""Looking through model wrappers: ``nn.DataParallel`` / DDP (``.module``), ``torch.compile``'s
``OptimizedModule`` (``._orig_mod``) and framework wrappers that hold the user's model in
``.module`` (Fabric, Accelerate, DeepSpeed engines) or ``._forward_module``.

The data-flow checks (a conv's output going straight into a BatchNorm) normally come from
forward hooks on the profiled step, which see through wrappers that call the inner module.
A compiled model runs its layers inside a graph where module hooks do not fire; for it the
structure of the innermost user module stands in: consecutive children of an
``nn.Sequential``.
"""

from __future__ import annotations

from torch import nn

__all__ = ["unwrap", "wrapper_chain", "sequential_conv_bias_bn"]

_INNER = ("_orig_mod", "module", "_forward_module")


def _inner(m: nn.Module) -> nn.Module | None:
    for attr in _INNER:
        inner = getattr(m, attr, None) if attr in m._modules or attr == "_orig_mod" else None
        if isinstance(inner, nn.Module) and inner is not m:
            return inner
    return None


def wrapper_chain(model: nn.Module, limit: int = 8) -> list[str]:
    """Class names from the outermost wrapper to the user's module (one name: no wrapper)."""
    names, m = [type(model).__name__], model
    for _ in range(limit):
        inner = _inner(m)
        if inner is None:
            break
        m = inner
        names.append(type(m).__name__)
    return names


def unwrap(model: nn.Module, limit: int = 8) -> nn.Module:
    """The innermost user module under any chain of wrappers."""
    m = model
    for _ in range(limit):
        inner = _inner(m)
        if inner is None:
            return m
        m = inner
    return m


def sequential_conv_bias_bn(model: nn.Module) -> list[list[str]]:
    """(conv, batch-norm) name pairs where a conv with a bias directly precedes a BatchNorm
    among the children of an ``nn.Sequential`` of the unwrapped model."""
    pairs = []
    for name, seq in unwrap(model).named_modules():
        if not isinstance(seq, nn.Sequential):
            continue
        kids = list(seq.named_children())
        for (a, ma), (b, mb) in zip(kids, kids[1:]):
            if isinstance(ma, nn.modules.conv._ConvNd) and ma.bias is not None \
                    and isinstance(mb, nn.modules.batchnorm._BatchNorm):
                pre = f"{name}." if name else ""
                pairs.append([pre + a, pre + b])
    return pairs
