"""Recipe.compile: the step runs the torch.compile'd model and matches eager (slow: compiles)."""

from __future__ import annotations

import pytest
import torch

from engine_helpers import ce, data, loader, max_diff, twins
from pitstop.engine import Recipe, make_step


@pytest.mark.slow
def test_compiled_step_matches_eager():
    a, opt_a, b, opt_b = twins()
    compiled = make_step(a, opt_a, ce, Recipe(compile="default"))
    eager = make_step(b, opt_b, ce, Recipe())
    assert type(compiled.train_model).__name__ == "OptimizedModule" and compiled.model is a
    for batch in loader(data(32), 8):
        compiled(batch)
        eager(batch)
    # Inductor fuses and reorders float ops: equal up to rounding after 4 SGD steps
    assert max_diff(a, b) < 1e-5
    assert list(a.state_dict()) == list(b.state_dict())  # checkpoints keep the plain names
