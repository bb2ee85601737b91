"""Synthetic datasets for the bundled workloads: deterministic, learnable, no downloads.

Every sample is a pure function of its index (and the dataset's seed), so two runs, or a
worker process and the main process, see the same data. Labels depend on the inputs, so the
loss really goes down and ``tune`` can compare loss trajectories.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["SyntheticImages", "SyntheticTokens", "SyntheticTabular", "augment"]


def _blur(img: np.ndarray, passes: int) -> np.ndarray:
    """Separable 5-tap binomial blur, ``passes`` times (the CPU-heavy part of augment)."""
    k = np.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=np.float32) / 16.0
    for _ in range(passes):
        padded = np.pad(img, ((0, 0), (2, 2), (2, 2)), mode="reflect")
        rows = sum(k[i] * padded[:, i : i + img.shape[1], :] for i in range(5))
        img = sum(k[i] * rows[:, :, i : i + img.shape[2]] for i in range(5))
    return img.astype(np.float32, copy=False)


def augment(img: np.ndarray, rng: np.random.Generator, passes: int) -> np.ndarray:
    """A typical per-sample CPU augmentation: pad+random crop, flip, colour jitter, blur, normalize."""
    c, h, w = img.shape
    padded = np.pad(img, ((0, 0), (4, 4), (4, 4)), mode="reflect")
    top, left = rng.integers(0, 9, size=2)
    img = padded[:, top : top + h, left : left + w]
    if rng.random() < 0.5:
        img = img[:, :, ::-1]
    brightness = rng.uniform(0.8, 1.2)
    contrast = rng.uniform(0.8, 1.2)
    mean = img.mean(axis=(1, 2), keepdims=True)
    img = (img - mean) * contrast + mean * brightness
    img = _blur(np.ascontiguousarray(img, dtype=np.float32), passes)
    return (img - img.mean()) / (img.std() + 1e-5)


class SyntheticImages(Dataset):
    """Class-dependent stripe patterns plus noise, with a CPU-heavy per-sample transform.

    ``work`` is the number of blur passes per sample: it sets how much the data pipeline
    costs relative to the model, so that data loading measurably matters (PIT101).
    """

    def __init__(self, n: int = 2048, size: int = 32, num_classes: int = 10, work: int = 6, seed: int = 0):
        self.n, self.size, self.num_classes, self.work, self.seed = n, size, num_classes, work, seed
        yy, xx = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
        angles = np.linspace(0, np.pi, num_classes, endpoint=False)
        self._patterns = np.stack(
            [np.sin((np.cos(a) * xx + np.sin(a) * yy) * (2 * np.pi / 8)) for a in angles]
        ).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        if not 0 <= idx < self.n:
            raise IndexError(idx)
        rng = np.random.default_rng((self.seed, idx))
        label = idx % self.num_classes
        base = self._patterns[label][None].repeat(3, axis=0) * rng.uniform(0.5, 1.5, size=(3, 1, 1))
        img = base + rng.normal(0.0, 0.8, size=base.shape)
        img = augment(img.astype(np.float32), rng, self.work)
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), label


class SyntheticTokens(Dataset):
    """Next-token prediction on sequences with learnable structure.

    Each sequence follows ``t[i+1] = (a * t[i] + b) % vocab`` with a per-sequence (a, b)
    drawn from a small set, plus occasional noise tokens: a GPT learns it quickly.
    """

    def __init__(self, n: int = 1024, block_size: int = 64, vocab_size: int = 1000, seed: int = 0):
        self.n, self.block_size, self.vocab_size, self.seed = n, block_size, vocab_size, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        if not 0 <= idx < self.n:
            raise IndexError(idx)
        rng = np.random.default_rng((self.seed, idx))
        a = int(rng.choice([1, 3, 5, 7]))
        b = int(rng.integers(1, 17))
        seq = np.empty(self.block_size + 1, dtype=np.int64)
        seq[0] = rng.integers(0, self.vocab_size)
        for i in range(self.block_size):
            seq[i + 1] = (a * seq[i] + b) % self.vocab_size
        noise = rng.random(seq.shape) < 0.05
        seq[noise] = rng.integers(0, self.vocab_size, size=int(noise.sum()))
        t = torch.from_numpy(seq)
        return t[:-1], t[1:]


class SyntheticTabular:
    """A teacher-labelled tabular problem, held as numpy arrays (the usual starting point)."""

    def __init__(self, n: int = 4096, features: int = 64, num_classes: int = 10, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(n, features)).astype(np.float32)
        teacher = rng.normal(size=(features, num_classes)).astype(np.float32)
        self.y = (np.tanh(self.x) @ teacher).argmax(axis=1).astype(np.int64)

    def __len__(self) -> int:
        return len(self.x)
