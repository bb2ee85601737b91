"""Tiny models and data shared by the engine tests (not a test module)."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def mlp(seed: int = 0, features: int = 8, hidden: int = 16, classes: int = 4) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def data(n: int = 64, features: int = 8, classes: int = 4, seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, features, generator=g), torch.randint(0, classes, (n,), generator=g))


def ce(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def loader(ds, batch_size: int, shuffle: bool = False) -> DataLoader:
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle)


def twins(seed: int = 0, lr: float = 0.1, opt: str = "sgd", **kw):
    """Two identical models with identical optimizers."""
    a = mlp(seed, **kw)
    b = copy.deepcopy(a)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=lr, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=lr * 0.1, foreach=False)}[opt]
    return a, make(a.parameters()), b, make(b.parameters())


def max_diff(a: nn.Module, b: nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))
