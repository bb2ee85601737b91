"""pitstop tune, the parts that need no training run: loss checks, verdicts, knobs, patches."""

from __future__ import annotations

import math

import pytest

from pitstop.engine.recipe import Recipe
from pitstop.registry import implementations
from pitstop.tune.equivalence import FLOOR_EXACT, FLOOR_REDUCED, check_losses, median_trajectory
from pitstop.tune.knob import Context, Knob, all_knobs
from pitstop.tune.result import Run
from pitstop.tune.search import TuneOptions, merge_recipe_fields, select_knobs
from pitstop.tune.verdict import compare, noise_floor, speed_verdict

from conftest import parse_tips_spec

BASE = [2.30, 2.10, 1.90, 1.75, 1.60, 1.50, 1.42, 1.35]


# -- equivalence -----------------------------------------------------------------------------
def test_identical_and_slightly_different_losses_pass():
    assert check_losses([BASE, BASE], [BASE]).status == "ok"
    close = [v * 1.002 for v in BASE]
    check = check_losses([BASE, BASE], [close], reduced_precision=True)
    assert check.status == "ok" and check.deviation == pytest.approx(0.002, rel=0.05)
    assert check.tolerance == FLOOR_REDUCED


def test_a_perturbed_trajectory_is_rejected_with_the_numbers():
    shifted = [v * 1.2 for v in BASE]
    check = check_losses([BASE, BASE], [shifted])
    assert check.status == "diverged" and not check.passed
    assert check.deviation == pytest.approx(0.2, rel=0.01) and check.tolerance == FLOOR_EXACT
    assert "20.0%" in check.message and "tolerance 1.0%" in check.message


def test_nan_is_rejected_naming_the_step():
    bad = BASE[:3] + [math.nan] + BASE[4:]
    check = check_losses([BASE], [bad])
    assert check.status == "nan" and "step 4" in check.message


def test_tolerance_scales_with_the_baselines_own_spread():
    noisy = [[v * (1 + 0.04 * (-1) ** i) for v in BASE] for i in range(2)]  # baseline runs differ by ~8%
    shifted = [v * 1.1 for v in median_trajectory(noisy)]
    check = check_losses(noisy, [shifted])
    assert check.tolerance > 0.2 and check.status == "ok"  # 3 x the spread, not the 1% floor
    assert check_losses([BASE, BASE], [shifted]).status == "diverged"  # same trial, quiet baseline


def test_no_losses_means_unchecked_not_rejected():
    check = check_losses([[None] * 5], [[None] * 5])
    assert check.status == "unchecked" and check.passed


# -- verdicts ----------------------------------------------------------------------------------
def _runs(step: float, rounds=3, n=10, jitter=0.01):
    return [Run("ok", step_times=[step * (1 + jitter * ((i * 7 + r) % 5 - 2)) for i in range(n)], round=r)
            for r in range(rounds)]


def test_a_large_speedup_is_kept_a_small_one_is_no_gain_and_a_loss_is_slower():
    base = _runs(0.100)
    noise = noise_floor(base)
    assert 0 <= noise < 0.05
    status, reason = speed_verdict(compare(base, _runs(0.050)), noise)
    assert status == "kept" and "3/3 rounds" in reason
    assert speed_verdict(compare(base, _runs(0.098)), noise)[0] == "no_gain"
    assert speed_verdict(compare(base, _runs(0.150)), noise)[0] == "slower"


def test_noise_floor_raises_the_bar():
    base = [Run("ok", step_times=[0.10] * 10, round=0), Run("ok", step_times=[0.16] * 10, round=1)]
    assert noise_floor(base) == pytest.approx(0.6)
    trial = [Run("ok", step_times=[0.08] * 10, round=0), Run("ok", step_times=[0.11] * 10, round=1)]
    status, reason = speed_verdict(compare(base, trial), noise_floor(base))
    assert status == "no_gain" and "noise 60%" in reason


def test_a_trick_that_loses_rounds_is_not_kept():
    base = _runs(0.100, rounds=4)
    trial = _runs(0.050, rounds=4)
    trial[3].step_times = [0.2] * 10  # one round slower than its paired baseline
    speed = compare(base, trial)
    assert speed.rounds == 4 and speed.rounds_won == 3
    assert speed_verdict(speed, 0.0)[0] == "kept"  # 3 of 4: three quarters
    trial[2].step_times = [0.2] * 10
    assert speed_verdict(compare(base, trial), 0.0)[0] != "kept"


def test_options_are_validated():
    with pytest.raises(ValueError, match="repeats"):
        TuneOptions(repeats=0)
    with pytest.raises(ValueError, match="budget"):
        TuneOptions(budget=-1)


# -- knobs -------------------------------------------------------------------------------------
def test_every_K_code_of_TIPS_has_a_registered_knob():
    codes = {row.code for row in parse_tips_spec() if "K" in row.faces}
    assert codes == {"PIT101", "PIT102", "PIT104", "PIT301", "PIT304", "PIT401", "PIT406", "PIT501", "PIT601", "PIT602"}
    registered = {k.tip for k in all_knobs()}
    assert codes <= registered
    assert all(issubclass(c, Knob) for c in implementations("K"))


CPU = Context(device="cpu", cpu_count=2, conv2d=3, input_dims=4, optimizer="SGD", optimizer_mode="for-loop",
              fused_available=True, loader_workers=0, pin_memory=False, batch_size=64)


def test_every_knob_value_is_a_valid_recipe():
    for knob in all_knobs():
        ctx = CPU if knob.memory_role is None else Context(mode="api", blocks=("blocks.*",))
        values = knob.values(ctx) or [2]
        for value in values:
            fields = knob.recipe_fields(value, ctx)
            assert fields, knob
            Recipe(**fields)  # raises on an invalid field or value


def test_cpu_only_training_marks_the_cuda_knobs_not_applicable_with_a_reason():
    knobs = {k.tip: k for k in all_knobs()}
    for code in ("PIT102", "PIT304", "PIT602"):
        app = knobs[code].applies(CPU)
        assert not app and "CUDA only" in app.reason, code
    for code in ("PIT101", "PIT104", "PIT301", "PIT501"):
        assert knobs[code].applies(CPU), code
    mlp = Context(device="cpu", cpu_count=2, conv2d=0, input_dims=2)
    assert "no Conv2d" in knobs["PIT104"].applies(mlp).reason
    assert knobs["PIT101"].values(CPU) == [1, 2]
    assert knobs["PIT501"].values(CPU) == ["fused", "foreach"]
    assert knobs["PIT301"].values(CPU) == ["bf16"]  # script mode: bf16 only (fp16 needs a GradScaler)
    assert "already" in knobs["PIT301"].applies(Context(autocast="bfloat16")).reason


def test_recipe_field_conflicts_and_only_selection():
    merged, conflict = merge_recipe_fields([{"precision": "bf16-mixed"}, {"channels_last": True}])
    assert conflict is None and merged == {"precision": "bf16-mixed", "channels_last": True}
    _, conflict = merge_recipe_fields([{"precision": "bf16-mixed"}, {"precision": "tf32"}])
    assert "Recipe.precision" in conflict
    knobs = all_knobs()
    assert {k.tip for k in select_knobs(knobs, ["PIT301", "channels-last"])} == {"PIT301", "PIT104"}
    with pytest.raises(ValueError, match="PIT999"):
        select_knobs(knobs, ["PIT999"])


def test_unregistered_knobs_stay_out_of_the_catalog():
    class Planted(Knob, tip="PIT301", register=False):
        name, title = "planted-unit", "planted"

    assert Planted.tip == "PIT301"
    assert Planted not in implementations("K")


# -- child-side patches (in this process; undone after each test) -------------------------------
@pytest.fixture
def patches():
    from pitstop.tune import patch

    yield patch
    patch.reset()


def test_autocast_knob_wraps_the_top_level_forward_and_returns_fp32(patches):
    import torch
    from torch import nn

    from pitstop.tune.knob import all_knobs

    knob = next(k for k in all_knobs() if k.tip == "PIT301")
    seen = []
    knob.apply_in_child("bf16", device="cpu")

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x):
            out = self.lin(x)
            seen.append(out.dtype)
            return out

    model, loss_mod = Probe(), nn.MSELoss()
    with torch.no_grad():
        model.eval()
        model(torch.randn(2, 8))  # an eval forward is not the training forward
        model.train()
    out = model(torch.randn(2, 8))
    assert seen == [torch.float32, torch.bfloat16]
    assert out.dtype == torch.float32 and "forward" in vars(model)
    loss_mod(out, torch.zeros(2, 4)).backward()
    assert nn.Module.__call__ is not None and "call" not in patches._installed  # the finder is gone


def test_channels_last_and_optimizer_and_loader_patches(patches):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    knobs = {k.tip: k for k in all_knobs()}
    knobs["PIT104"].apply_in_child(True)
    knobs["PIT501"].apply_in_child("fused")
    knobs["PIT101"].apply_in_child(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    assert opt.param_groups[0]["fused"] is True
    x = torch.randn(2, 3, 8, 8)
    model(x).sum().backward()
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    loader = DataLoader(list(range(8)), batch_size=4)
    assert loader.num_workers == 2 and loader.persistent_workers
    explicit = DataLoader(list(range(8)), batch_size=4, num_workers=1)
    assert explicit.num_workers == 1  # a user's own worker count is left alone
    patches.reset()
    assert DataLoader(list(range(8))).num_workers == 0
    assert torch.optim.SGD(model.parameters(), lr=0.1).param_groups[0]["fused"] is None


def test_comparisons_use_the_baseline_runs_of_the_same_rounds():
    """A configuration measured later, under another load, is compared with the baseline as
    it ran then (rounds 3-5 here ran twice as slow for everyone)."""
    quiet = _runs(0.100, rounds=3)
    busy = [Run("ok", step_times=[0.200] * 10, round=r) for r in (3, 4, 5)]
    trial_busy = [Run("ok", step_times=[0.190] * 10, round=r) for r in (3, 4, 5)]
    speed = compare(quiet + busy, trial_busy)
    assert speed.ratio == pytest.approx(0.200 / 0.190) and speed.rounds == 3 and speed.rounds_won == 3


def test_slower_needs_the_rounds_too():
    base = _runs(0.100, rounds=3)
    trial = _runs(0.200, rounds=3)
    assert speed_verdict(compare(base, trial), 0.0)[0] == "slower"
    trial[0].step_times = trial[1].step_times = [0.09] * 10  # faster in two of three rounds
    trial[2].step_times = [0.5] * 200
    status, reason = speed_verdict(compare(base, trial), 0.0)
    assert status == "no_gain" and "rounds" in reason
