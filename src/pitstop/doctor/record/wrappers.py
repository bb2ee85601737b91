"""Looking through model wrappers (``unwrap`` / ``wrapper_chain``, implemented in
:mod:`pitstop.doctor.record.frameworks`: DataParallel/DDP/FSDP/DeepSpeed ``.module``,
``torch.compile``'s ``._orig_mod``, Fabric's ``._forward_module``).

The data-flow checks (a conv's output going straight into a BatchNorm) normally come from
forward hooks on the profiled step, which see through wrappers that call the inner module.
A compiled model runs its layers inside a graph where module hooks do not fire; for it the
structure of the innermost user module stands in: consecutive children of an
``nn.Sequential``.
"""

from __future__ import annotations

from torch import nn

from pitstop.doctor.record.frameworks import unwrap, wrapper_chain  # the one implementation, re-exported here

__all__ = ["unwrap", "wrapper_chain", "sequential_conv_bias_bn"]


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
