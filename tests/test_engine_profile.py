"""ProfileSteps: a profiler window over whole optimizer steps, written as a Chrome trace."""

from __future__ import annotations

import json

import pytest
import torch

from engine_helpers import ce, data, loader, twins
from pitstop.engine import ProfileSteps, Recipe, fit


def test_profile_window_covers_whole_optimizer_steps(tmp_path):
    model, opt, _, _ = twins()
    prof = ProfileSteps(tmp_path / "trace.json", wait=1, warmup=1, active=2, memory_snapshot=tmp_path / "mem.pickle")
    fit(model, opt, ce, loader(data(96), 8), recipe=Recipe(accumulate=2), max_steps=6, callbacks=[prof], progress=False)
    trace = json.loads((tmp_path / "trace.json").read_text())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]  # steps 3 and 4: after 1 wait + 1 warm-up
    assert any("addmm" in n or "linear" in n for n in names)  # forward ops are in the window
    assert any("Optimizer.step" in n for n in names)
    assert prof.key_averages is not None
    assert prof.written == [tmp_path / "trace.json"]  # the CUDA memory snapshot is skipped on CPU
    assert not (tmp_path / "mem.pickle").exists() or torch.cuda.is_available()


def test_profile_arguments_are_checked():
    with pytest.raises(ValueError, match="active must be an int >= 1, got 0"):
        ProfileSteps("t.json", active=0)
