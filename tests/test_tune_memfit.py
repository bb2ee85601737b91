"""Tune for a memory budget: the cheapest combination that fits and keeps the effective batch, losses checked.

API mode (in this process, an engine training) and script mode (an unmodified script whose
DataLoader batch the search may shrink, runs forked from the warm worker), on a wide block MLP
whose activations dominate its memory at the batch used. Each budget is set below what the plain step takes,
measured here first, so the search has to find something else.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import FIXTURES

pytestmark = pytest.mark.slow

LOADER_SCRIPT = str(FIXTURES / "doctor" / "memory_loader.py")


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, 8 * width), nn.GELU(), nn.Linear(8 * width, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    def __init__(self, width=64, depth=4):
        super().__init__()
        self.inp = nn.Linear(16, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _training(batch: int = 256):
    """A narrow block MLP at a large batch: its activations outweigh parameters, gradients and
    momentum (the engine frees the gradients before each forward: the peak then grows with the batch)."""
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 16), torch.randint(0, 4, (2048,)))
    return (Net(width=32), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]), DataLoader(data, batch_size=batch))


def test_api_mode_fits_the_budget_keeps_the_effective_batch_and_the_losses():
    from pitstop.tune.inprocess import ApiBackend
    from pitstop.tune.knob import all_knobs
    from pitstop.tune.memfit.search import tune_memory

    model, opt, loss_fn, loader = _training()
    plain = ApiBackend(model, opt, loss_fn, loader).run((), all_knobs(), memory_only=True)
    budget = int(0.8 * plain.peak_memory)  # the plain step does not fit
    fit = tune_memory(model, opt, loss_fn, loader, budget=budget, steps=2, warmup=1)
    rows = {(r.variant, r.accumulate): r for r in fit.rows}
    assert rows["plain", 1].fits is False and rows["plain", 1].status == "over_budget"
    c = fit.chosen
    assert c is not None and c.fits and c.peak * 1.1 <= budget and c.status == "ok"
    assert c.accumulate * c.micro_batch == fit.effective_batch == 256  # the effective batch is kept
    assert c.loss["status"] == "ok" and fit.reference.startswith("plain, the whole batch")
    assert c.recipe.get("accumulate", 1) == c.accumulate
    fitting = [r for r in fit.rows if r.status == "ok"]
    assert c.samples_per_s == max(r.samples_per_s for r in fitting)  # the cheapest: the fastest that passes


def test_script_mode_keeps_the_scripts_batch_with_checkpointing(warm_doctor):
    from pitstop.tune.memfit.script import tune_memory_script

    budget = int(4.2 * 2**20)  # the plain step takes 4.1 MiB (+10% margin: over); checkpointed 3.3 MiB
    fit = tune_memory_script(LOADER_SCRIPT, budget=budget, steps=2, warmup=1, worker=warm_doctor.runner)
    rows = {(r.variant, r.micro_batch): r for r in fit.rows}
    assert fit.effective_batch == 64 and rows["plain", 64].status == "over_budget"
    c = fit.chosen
    assert c is not None and c.micro_batch == 64 and c.variant.startswith("checkpoint blocks.*")
    assert c.peak * 1.1 <= budget < rows["plain", 64].peak * 1.1
    assert c.loss["status"] == "ok"  # checkpointing recomputes: the same losses
    smaller = [r for r in fit.rows if r.micro_batch < 64 and r.status == "ok"]
    assert all("effective batch changes" in r.reason for r in smaller)
