"""Which dimension of a training batch is the batch, from how the model consumes it.

Dim 0 is the usual layout, but sequence-first data (``(seq_len, batch)``, the default of
``nn.LSTM`` / ``nn.GRU`` / ``nn.Transformer*`` / ``nn.MultiheadAttention`` with
``batch_first=False``) puts the batch in dim 1: counting dim 0 would report the sequence
length as the batch size. The doctor watches the first forward of each model: when a
recurrent or attention layer receives a 3-D input, that layer's ``batch_first`` says
where its batch is; the dimension of the model's own input with the same size is the
batch dimension. Without such a layer the batch is dim 0. Keyword batches
(``model(**batch)``, Hugging Face style) use ``input_ids`` when present, else the first
tensor. Integer 2-D inputs (token ids) count tokens: their number of elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["BatchInfo", "Layout", "first_tensor", "primary_input", "seq_layout", "batch_info"]


@dataclass(frozen=True)
class Layout:
    """How one model lays out its batch: ``dim`` of the primary input, and how we know."""

    dim: int
    how: str


@dataclass(frozen=True)
class BatchInfo:
    """One training forward's batch: ``size`` samples along ``dim`` of input ``name``;
    ``tokens`` when the input is a sequence batch (else None)."""

    size: int
    dim: int
    name: str
    how: str
    tokens: int | None = None


def first_tensor(obj: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in a (nested) batch or argument tuple."""
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 3:
        return None
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for o in obj:
            t = first_tensor(o, depth + 1)
            if t is not None:
                return t
    return None


def primary_input(args: tuple, kwargs: dict[str, Any] | None) -> tuple[str, torch.Tensor] | None:
    """The input that carries the batch: the first positional tensor, else the keyword
    ``input_ids`` (or the first keyword tensor). Returns (name, tensor)."""
    for i, a in enumerate(args or ()):
        if isinstance(a, torch.Tensor) and a.dim() > 0:
            return f"argument {i}", a
    kwargs = kwargs or {}
    if isinstance(kwargs.get("input_ids"), torch.Tensor) and kwargs["input_ids"].dim() > 0:
        return "input_ids", kwargs["input_ids"]
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return k, v
    for i, a in enumerate(args or ()):  # a dict / tuple batch passed as one argument (Lightning)
        if isinstance(a, dict):
            found = primary_input((), a)
            if found is not None:
                return f"argument {i}[{found[0]!r}]", found[1]
        elif isinstance(a, (list, tuple)) and a:
            found = primary_input(tuple(a), None)
            if found is not None:
                return f"argument {i}[{found[0].split()[-1]}]", found[1]
    return None


def seq_layout(module: Any, args: tuple, top: torch.Tensor) -> Layout | None:
    """When ``module`` (called inside a model's forward) is a recurrent or attention
    layer fed a 3-D tensor, the dimension of ``top`` (the model's input) holding its batch."""
    from torch import nn

    if not isinstance(module, (nn.RNNBase, nn.MultiheadAttention)) or not args:
        return None
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        return None  # PackedSequence or an unbatched input says nothing
    first = bool(getattr(module, "batch_first", False))
    b = int(x.shape[0 if first else 1])
    kind = type(module).__name__
    dims = [d for d in range(min(top.dim(), 2)) if int(top.shape[d]) == b]
    if not dims:
        return None
    dim = dims[0] if len(dims) == 1 else (0 if first else 1)
    return Layout(dim, f"dim {dim}: the {kind} inside receives the batch with batch_first={first} "
                       f"(its batch of {b} matches input dim {dim})")


def batch_info(args: tuple, kwargs: dict[str, Any] | None, layout: Layout | None) -> BatchInfo | None:
    found = primary_input(args, kwargs)
    if found is None:
        return None
    name, x = found
    lay = layout if layout is not None and layout.dim < x.dim() else None
    dim = lay.dim if lay is not None else 0
    how = lay.how if lay is not None else "dim 0 (no recurrent or attention layer with batch_first=False consumes it)"
    tokens = None
    if x.dim() >= 2 and (not x.is_floating_point() or lay is not None):
        tokens = int(x.shape[0]) * int(x.shape[1])
    return BatchInfo(size=int(x.shape[dim]), dim=dim, name=name, how=f"{name}, {how}", tokens=tokens)
