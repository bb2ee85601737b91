"""Tiny models for the bundled workloads, tests and benchmarks.

``naive=True`` plants the structural problems the catalog talks about (a conv bias before
BatchNorm, sizes that are not multiples of 8, adjacent Linear layers); ``naive=False`` is
the clean version of the same architecture, for tests that must find nothing.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["SmallCNN", "TinyGPT", "MLP", "make_cnn", "make_gpt", "make_mlp"]


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU blocks and a linear head (``fc``), for 32x32 RGB images."""

    def __init__(self, num_classes: int = 10, width: int = 32, naive: bool = True):
        super().__init__()
        bias = naive  # PIT603: a conv bias right before BatchNorm is cancelled by the BN mean
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1, bias=bias), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
            nn.Conv2d(w, 2 * w, 3, padding=1, bias=bias), nn.BatchNorm2d(2 * w), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1, bias=bias), nn.BatchNorm2d(4 * w), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(4 * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class _Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """A nanoGPT-shaped decoder: token + position embeddings, pre-LN blocks, tied ``lm_head``."""

    def __init__(self, vocab_size: int = 1000, block_size: int = 64, n_layer: int = 2, n_head: int = 4,
                 n_embd: int = 128, dropout: float = 0.1):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class MLP(nn.Module):
    """A tabular classifier; the naive version has a 500-wide layer and two adjacent Linears."""

    def __init__(self, features: int = 64, num_classes: int = 10, naive: bool = True):
        super().__init__()
        hidden = 500 if naive else 512  # PIT604: 500 is not a multiple of 8
        layers: list[nn.Module] = [nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 256)]
        if naive:
            layers += [nn.Linear(256, 128)]  # PIT606: no non-linearity between two Linears
        else:
            layers += [nn.ReLU(), nn.Linear(256, 128)]
        layers += [nn.ReLU(), nn.Linear(128, num_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_cnn(naive: bool = True, **kw) -> SmallCNN:
    return SmallCNN(naive=naive, **kw)


def make_gpt(naive: bool = True, **kw) -> TinyGPT:
    # PIT604: a vocabulary of 1000 is not a multiple of 64; 1024 is.
    kw.setdefault("vocab_size", 1000 if naive else 1024)
    return TinyGPT(**kw)


def make_mlp(naive: bool = True, **kw) -> MLP:
    return MLP(naive=naive, **kw)
