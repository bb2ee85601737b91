"""Test-time augmentation."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["tta"]


def tta(model: nn.Module, crops: torch.Tensor | Sequence[torch.Tensor], reduce: str = "mean") -> torch.Tensor:
    """Average (or max) a model's outputs over several views of each sample.

    ``crops`` is a tensor of shape ``(batch, n_views, *sample_shape)`` or a sequence of
    ``n_views`` tensors of shape ``(batch, *sample_shape)``. All views go through the model
    as one batch, under ``inference_mode`` and ``eval()`` (restored afterwards).
    """
    if not isinstance(crops, torch.Tensor):
        crops = torch.stack(list(crops), dim=1)
    if crops.ndim < 3:
        raise ValueError(f"crops must be (batch, n_views, ...), got shape {tuple(crops.shape)}")
    if reduce not in ("mean", "max"):
        raise ValueError(f"reduce must be 'mean' or 'max', got {reduce!r}")
    b, n = crops.shape[:2]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(crops.reshape(b * n, *crops.shape[2:]))
    finally:
        model.train(was_training)
    out = out.reshape(b, n, *out.shape[1:])
    return out.mean(dim=1) if reduce == "mean" else out.amax(dim=1)
