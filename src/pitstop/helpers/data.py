"""Dataset splits."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Dataset, Subset, random_split

__all__ = ["split"]


def split(dataset: Dataset, fractions: Sequence[float], seed: int = 0) -> list[Subset]:
    """Split ``dataset`` into disjoint random subsets, e.g. ``split(ds, (0.8, 0.1, 0.1))``.

    Deterministic for a given ``seed`` (its own generator: the global RNG is untouched).
    Fractions must be positive and sum to 1; rounding remainders go to the first subsets.
    """
    fractions = list(fractions)
    if not fractions or any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be positive and sum to 1, got {fractions!r}")
    return random_split(dataset, fractions, generator=torch.Generator().manual_seed(seed))
