"""Reproducibility: seed every RNG in one call (PIT901)."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy, torch (CPU and every CUDA device).

    ``deterministic=True`` also calls ``torch.use_deterministic_algorithms(True)`` (the
    modern switch: ops without a deterministic implementation raise instead of silently
    varying) and turns off ``cudnn.benchmark`` (PIT902). No environment variable is set:
    older torch releases on CUDA also want ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` exported
    before CUDA starts (dropped by pytorch/pytorch#161749); they raise an error naming it.
    Returns ``seed``.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA devices too
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    return seed
