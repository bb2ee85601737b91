"""Fold layers for inference (PIT606): Conv+BatchNorm, and Linear+Linear with nothing between
(unless the pair is a bottleneck, which is cheaper unfolded).

The pairs are found on a ``torch.fx`` trace of the model (so ``self.bn(self.conv(x))`` in
a custom ``forward`` is found, not only ``nn.Sequential`` literals), but the folding is done
on a deep copy of the model itself: the result keeps its class, attributes and methods.
Numbers come from ``torch.nn.utils.fusion`` (Conv+BN) and exact algebra (Linear+Linear),
and the fused copy is checked against the original on random inputs before it is returned.
"""

from __future__ import annotations

import copy
from collections import Counter

import torch
from torch import fx, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from pitstop.helpers.precision import full_fp32

__all__ = ["fuse_for_inference", "FusionMismatchError"]

_CONV_BN = {nn.Conv1d: nn.BatchNorm1d, nn.Conv2d: nn.BatchNorm2d, nn.Conv3d: nn.BatchNorm3d}


class FusionMismatchError(RuntimeError):
    """The fused model's outputs differ from the original's beyond tolerance."""


def _fold_linears(first: nn.Linear, second: nn.Linear) -> nn.Linear:
    """``second(first(x)) == x @ (W2 W1)^T + (W2 b1 + b2)``, computed in float64."""
    w1, w2 = first.weight.double(), second.weight.double()
    bias = torch.zeros(second.out_features, dtype=torch.float64, device=w1.device)
    if first.bias is not None:
        bias = bias + w2 @ first.bias.double()
    if second.bias is not None:
        bias = bias + second.bias.double()
    out = nn.Linear(first.in_features, second.out_features, device=first.weight.device, dtype=first.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(w2 @ w1)
        out.bias.copy_(bias)
    return out


def _folding_pays(first: nn.Linear, second: nn.Linear) -> bool:
    """Folding in->h->out into in->out pays only if it does not add multiply-adds: a
    bottleneck (h small) is cheaper as two matmuls than as one in*out matmul."""
    return first.in_features * second.out_features <= first.out_features * (first.in_features + second.out_features)


def _pairs(model: nn.Module) -> list[tuple[str, str]]:
    """(producer, consumer) submodule names that are foldable, from an fx trace."""
    graph = fx.symbolic_trace(model).graph
    calls = Counter(n.target for n in graph.nodes if n.op == "call_module")
    modules = dict(model.named_modules())
    pairs, used = [], set()
    for node in graph.nodes:
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            continue
        prev = node.args[0]
        if not isinstance(prev, fx.Node) or prev.op != "call_module" or len(prev.users) != 1:
            continue
        a, b = prev.target, node.target
        if calls[a] != 1 or calls[b] != 1 or a in used or b in used:
            continue  # a shared module, or already part of a pair
        ma, mb = modules[a], modules[b]
        conv_bn = type(ma) in _CONV_BN and type(mb) is _CONV_BN[type(ma)] and mb.track_running_stats
        lin_lin = type(ma) is nn.Linear and type(mb) is nn.Linear and _folding_pays(ma, mb)
        if conv_bn or lin_lin:
            pairs.append((a, b))
            used.update((a, b))
    return pairs


def _sequential_pairs(model: nn.Module) -> list[tuple[str, str]]:
    """Fallback when the model cannot be traced: adjacent pairs inside nn.Sequential."""
    pairs = []
    for name, seq in model.named_modules():
        if not isinstance(seq, nn.Sequential):
            continue
        items = list(seq.named_children())
        i = 0
        while i < len(items) - 1:
            (na, ma), (nb, mb) = items[i], items[i + 1]
            ok = (type(ma) in _CONV_BN and type(mb) is _CONV_BN[type(ma)] and mb.track_running_stats) or (
                type(ma) is nn.Linear and type(mb) is nn.Linear and _folding_pays(ma, mb))
            if ok:
                prefix = f"{name}." if name else ""
                pairs.append((prefix + na, prefix + nb))
                i += 2
            else:
                i += 1
    return pairs


def _replace(model: nn.Module, dotted: str, new: nn.Module) -> None:
    parent, _, attr = dotted.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, new)


def _random_input(model: nn.Module) -> torch.Tensor:
    first = next((m for m in model.modules() if isinstance(m, (nn.Linear, *_CONV_BN))), None)
    p = next(model.parameters(), None)
    kw = {"device": p.device, "dtype": p.dtype} if p is not None else {}
    if isinstance(first, nn.Linear):
        return torch.randn(8, first.in_features, **kw)
    if first is not None:
        spatial = {nn.Conv1d: (32,), nn.Conv2d: (16, 16), nn.Conv3d: (8, 8, 8)}[type(first)]
        return torch.randn(4, first.in_channels, *spatial, **kw)
    raise ValueError("cannot infer an input shape for this model: pass example_input=")


def fuse_for_inference(model: nn.Module, example_input: torch.Tensor | None = None, *,
                       rtol: float = 1e-4, atol: float = 1e-5) -> nn.Module:
    """Return an eval-mode copy of ``model`` with Conv+BN and Linear+Linear pairs folded.

    The copy is checked on ``example_input`` (or a random input shaped for the first
    layer) against the original in eval mode; :class:`FusionMismatchError` is raised when
    ``torch.allclose(rtol, atol)`` fails. The check runs in full fp32 (TF32 and autocast off,
    restored after): it tests the folding, which is exact algebra, not the rounding of reduced
    -precision math. With TF32 (cuDNN's default for fp32 convolutions on Ampere+ GPUs) both
    models round to ~1e-3 relative, so comparing under TF32 would reject correct folds (seen:
    max abs error 4e-4 on an H100) or need a tolerance loose enough to pass wrong ones.
    The fused model then runs in whatever precision you run it in, as the original would.
    The original model is not modified. The copy has attribute ``fused_pairs`` listing what
    was folded.
    """
    reference = copy.deepcopy(model).eval()
    fused = copy.deepcopy(model).eval()
    try:
        pairs = _pairs(fused)
    except Exception:  # untraceable forward (data-dependent control flow): be conservative
        pairs = _sequential_pairs(fused)
    for a, b in pairs:
        ma, mb = fused.get_submodule(a), fused.get_submodule(b)
        new = fuse_conv_bn_eval(ma, mb) if isinstance(mb, nn.modules.batchnorm._BatchNorm) else _fold_linears(ma, mb)
        _replace(fused, a, new)
        _replace(fused, b, nn.Identity())
    x = example_input if example_input is not None else _random_input(model)
    with torch.inference_mode(), full_fp32(x.device.type):
        want, got = reference(x), fused(x)
    if not torch.allclose(want, got, rtol=rtol, atol=atol):
        err = (want - got).abs().max().item()
        raise FusionMismatchError(f"fused model differs from the original: max abs error {err:.3g} "
                                  f"(rtol={rtol}, atol={atol}); pairs {pairs}")
    fused.fused_pairs = pairs
    return fused
