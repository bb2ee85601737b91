"""Weight initialization (seed 002's ``init_weights``, without the print)."""

from __future__ import annotations

from torch import nn

__all__ = ["init_weights", "KINDS"]

KINDS = ("kaiming", "xavier", "normal", "orthogonal")


def init_weights(model: nn.Module, kind: str = "kaiming", gain: float = 0.02) -> nn.Module:
    """Initialize Conv/Linear weights by ``kind``, zero their biases, and set norm layers
    to weight ~ N(1, gain), bias 0. Returns ``model``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown init kind {kind!r}; choose one of {', '.join(KINDS)}")

    def init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            w = m.weight
            if kind == "normal":
                nn.init.normal_(w, 0.0, gain)
            elif kind == "xavier":
                nn.init.xavier_normal_(w, gain=gain)
            elif kind == "kaiming":
                nn.init.kaiming_normal_(w, a=0, mode="fan_in", nonlinearity="relu")
            else:
                nn.init.orthogonal_(w, gain=gain)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.modules.batchnorm._NormBase, nn.GroupNorm)) and m.weight is not None:
            nn.init.normal_(m.weight, 1.0, gain)
            nn.init.zeros_(m.bias)

    model.apply(init)
    return model
