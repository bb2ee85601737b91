"""pitstop tune, the parts that need no training run: loss checks, verdicts, knobs, patches."""

from __future__ import annotations

import math

import pytest

from pitstop.engine.recipe import Recipe
from pitstop.catalog import implementations
from pitstop.tune.equivalence import FLOOR_EXACT, FLOOR_REDUCED, check_losses, median_trajectory
from pitstop.tune.knob import Context, Knob, all_knobs
from pitstop.tune.result import Run
from pitstop.paired import Measure, Pair, Sample, choose_measure, decide
from pitstop.stats import paired_ratio_interval
from pitstop.tune.options import TuneOptions, merge_recipe_fields, select_knobs
from pitstop.tune.verdict import verdict

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


# -- verdicts (the paired core, pitstop.paired) ---------------------------------------------------
def _pairs(ratios, base=0.1, cpu_share=1.0, delay=0.0, sleep=0.0):
    """Pairs whose wall ratio is each of ``ratios``; CPU time, run-queue delay and sleep as given."""
    out = []
    for r in ratios:
        b = Sample(wall=base, cpu=base * cpu_share, run_delay=delay * base, active=base * (1 - sleep))
        t = Sample(wall=base / r, cpu=base * cpu_share / r, run_delay=delay * base / r, active=base / r * (1 - sleep))
        out.append(Pair(b, t))
    return out


def test_a_large_speedup_is_faster_a_small_one_same_and_a_loss_slower():
    assert decide(_pairs([2.0, 1.9, 2.1])).status == "faster"
    assert decide(_pairs([1.01, 0.99, 1.0])).status == "same"
    assert decide(_pairs([0.6, 0.62, 0.58])).status == "slower"
    status, reason = verdict(decide(_pairs([2.0, 1.9, 2.1])))
    assert status == "kept" and "3/3 pairs" in reason and "wall time" in reason


def test_a_likely_slowdown_is_not_called_no_gain_before_it_decides():
    """Noisy pairs of a real slowdown: the interval can no longer reach 1.05x, but its point
    estimate lies below 1/1.05: measure on (CI once called a planted 2x slowdown "no gain")."""
    d = decide(_pairs([0.8, 0.92, 0.85]))
    assert d.high < 1.05 and d.ratio < 1 / 1.05 and d.high > 1 / 1.05
    assert d.status == "undecided"
    assert decide(_pairs([0.8, 0.92, 0.85, 0.82, 0.84, 0.83])).status == "slower"


def test_an_effect_on_the_bar_stops_as_close_not_after_every_pair():
    """A busy-machine search spent 8 pairs each on fused/foreach at 1.05x [1.04, 1.06]: an
    interval that straddles the bar but cannot exceed it by half a margin is decided."""
    d = decide(_pairs([1.04, 1.055, 1.05, 1.06, 1.045]))
    assert d.low < 1.05 < d.high < 1.05 ** 1.5 and d.status == "close"
    status, reason = verdict(d)
    assert status == "no_gain" and "on the 1.05x bar" in reason
    assert decide(_pairs([0.95, 1.15, 1.05])).status == "undecided"   # wide: could still be a real gain
    assert decide(_pairs([1.06, 1.07, 1.065, 1.062])).status == "faster"  # above the bar stays kept


def test_no_verdict_from_one_pair_and_undecided_until_the_interval_decides():
    assert decide(_pairs([3.0])).status == "undecided"        # one pair decides nothing
    assert decide(_pairs([0.2])).status == "undecided"        # not even a 5x slowdown
    assert decide(_pairs([0.2, 0.25])).status == "slower"     # two pairs far below 1/2 may stop it
    assert decide(_pairs([2.0, 2.0])).status == "undecided"   # a gain needs min_pairs (3)
    mixed = decide(_pairs([1.6, 0.8, 1.5, 0.9]))
    assert mixed.status == "undecided" and mixed.low < 1.05 < mixed.high
    assert verdict(mixed)[0] == "no_gain" and "undecided" in verdict(mixed)[1]


def test_the_baselines_own_spread_is_no_second_bar():
    """Load that changes between pairs (every sample of pair i slowed by the same factor)
    widens nothing: each pair's ratio cancels it."""
    pairs = [Pair(Sample(wall=0.1 * k), Sample(wall=0.05 * k)) for k in (1.0, 3.0, 1.5, 6.0)]
    d = decide(pairs)
    assert d.status == "faster" and d.ratio == pytest.approx(2.0) and d.low == pytest.approx(2.0)


def test_the_measure_follows_the_observed_load():
    quiet = choose_measure(_pairs([1.5] * 3, delay=0.01))
    assert quiet.name == "wall" and "quiet" in quiet.why
    busy = choose_measure(_pairs([1.5] * 3, delay=0.8))
    assert busy.name == "cpu" and "busy" in busy.why
    waiting = choose_measure(_pairs([1.5] * 3, delay=0.8, sleep=0.7))
    assert waiting.name == "wall" and "wait-dominated" in waiting.why
    b = Sample(wall=0.1, cpu=0.1, run_delay=0.05, active=0.1)
    parallel = choose_measure([Pair(b, Sample(wall=0.06, cpu=0.12, run_delay=0.03, active=0.06))] * 3)
    assert parallel.name == "wall" and "cores" in parallel.why
    gpu = choose_measure([Pair(Sample(wall=0.1, gpu=0.05), Sample(wall=0.1, gpu=0.04))])
    assert gpu.name == "gpu"
    assert choose_measure([Pair(Sample(wall=0.1), Sample(wall=0.05))]).name == "wall"  # no clocks: wall


def test_one_contended_run_is_enough_to_leave_wall_time():
    """Load that comes and goes (CI once: two spinners, the scheduler gave the tuned process a
    core of its own most of the time): a no-op trial whose baseline runs were the contended
    ones looked 1.1-1.2x faster on wall time, 3/3 pairs. The typical run was quiet; the
    busiest one decides, and on CPU time the no-op is the same."""
    quiet = Sample(wall=0.100, cpu=0.100, run_delay=0.0, active=0.100)
    contended = Sample(wall=0.125, cpu=0.100, run_delay=0.025, active=0.125)  # waited 25% for a core
    pairs = [Pair(contended, quiet), Pair(quiet, quiet), Pair(contended, quiet)]
    m = choose_measure(pairs)
    assert m.name == "cpu" and "up to 25%" in m.why and m.contention == pytest.approx(0.25)
    assert decide(pairs).status == "same"
    assert decide(pairs, measure=Measure("wall", "forced")).ratio > 1.05  # what wall time would have said


def test_a_contended_single_thread_does_not_change_parallelism():
    """Waiting for a core lowers CPU s per wall s (1.0 -> 0.8) but not the cores the step
    wants: contention on one side is not a change of parallelism that sends it to wall time."""
    quiet = Sample(wall=0.100, cpu=0.100, run_delay=0.0, active=0.100)
    contended = Sample(wall=0.125, cpu=0.100, run_delay=0.025, active=0.125)
    assert choose_measure([Pair(contended, quiet)] * 3).name == "cpu"


def test_busy_pairs_decide_on_cpu_time_what_quiet_pairs_decide_on_wall_time():
    """The same planted 2x effect: quiet (wall ratios 2x) and busy (wall ratios scrambled by
    load, CPU ratios still 2x): the same verdict."""
    quiet = decide(_pairs([2.0, 2.0, 2.0], delay=0.0))
    busy = [Pair(Sample(wall=0.1 * w1, cpu=0.1, run_delay=0.1 * (w1 - 1), active=0.1 * w1),
                 Sample(wall=0.05 * w2, cpu=0.05, run_delay=0.05 * (w2 - 1), active=0.05 * w2))
            for w1, w2 in ((1.0, 3.5), (2.5, 1.2), (3.0, 3.0))]
    assert quiet.status == decide(busy).status == "faster"
    assert decide(busy).measure.name == "cpu" and decide(busy).ratio == pytest.approx(2.0)


def test_paired_interval_is_wide_with_few_pairs_and_contains_the_point():
    one = paired_ratio_interval([1.5])
    assert one.low == 0 and one.high == math.inf
    iv = paired_ratio_interval([1.4, 1.6, 1.5, 1.45, 1.55])
    assert iv.low <= iv.ratio <= iv.high and 1.4 <= iv.low < 1.5 < iv.high <= 1.6


def test_run_sample_combines_process_and_worker_cpu():
    run = Run("ok", step_times=[0.1, 0.2, 0.3], cpu_times=[0.05, 0.1, 0.15], run_delays=[0.0, 0.0, 0.0],
              actives=[0.1, 0.2, 0.3])
    s = run.sample()
    assert s.wall == pytest.approx(0.2) and s.cpu == pytest.approx(0.1) and s.gpu is None
    assert Run("ok", step_times=[0.1], cpu_times=[]).sample().cpu is None  # no clocks: wall only


def test_options_are_validated():
    with pytest.raises(ValueError, match="repeats"):
        TuneOptions(repeats=0)
    with pytest.raises(ValueError, match="budget"):
        TuneOptions(budget=-1)


# -- knobs -------------------------------------------------------------------------------------
def test_every_K_code_of_TIPS_has_a_registered_knob():
    codes = {row.code for row in parse_tips_spec() if "K" in row.faces}
    assert codes == {"PIT101", "PIT102", "PIT104", "PIT108", "PIT301", "PIT304", "PIT401", "PIT406", "PIT501", "PIT601",
                     "PIT602", "PIT608", "PIT609", "PIT705", "PIT706"}
    registered = {k.tip for k in all_knobs()}
    # PIT608's K face is planned (shown lower case by `pitstop tips`): tune explains graph
    # breaks in the compile knob's verdict (PIT601), but no knob of its own removes them yet
    planned = {"PIT608"}
    assert codes - planned <= registered and not planned & registered
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
    # training on the CPU: its compute uses every core, so workers go up to half of them; on a GPU, to all
    assert knobs["PIT101"].values(CPU) == [1]
    assert knobs["PIT101"].values(Context(device="cpu", cpu_count=16, loader_workers=0)) == [2, 8]
    assert knobs["PIT101"].values(Context(device="cuda", cpu_count=2, loader_workers=0)) == [1, 2]
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
    with torch.no_grad():  # evaluation after training: left as written, as the pasted snippet leaves it
        model(torch.randn(2, 8))
    assert seen[-1] == torch.float32
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


def test_the_survey_breakdown_becomes_phase_shares_of_the_context():
    from pitstop.tune.context import context_from_observations

    ctx = context_from_observations({"device": "cpu", "breakdown": {"data": 0.03, "forward": 0.05, "optimizer": 0.02}})
    assert ctx.share(("optimizer",)) == pytest.approx(0.2) and ctx.share(("data", "optimizer")) == pytest.approx(0.5)
    assert context_from_observations({"device": "cpu"}).share(("optimizer",)) is None  # not surveyed: no pruning
    knobs = {k.tip: k for k in all_knobs()}
    assert knobs["PIT501"].phases("fused", ctx) == ("optimizer",)
    assert knobs["PIT101"].phases(1, Context(loader_workers=0)) and not knobs["PIT101"].phases(0, Context(loader_workers=4))


def test_one_status_vocabulary_from_decision_to_verdict_to_report():
    """Every paired decision maps to a trial status, and the report names every trial and
    combination status (no status string made up on the way)."""
    from typing import get_args

    from pitstop.paired import DecisionStatus
    from pitstop.report.tune_terminal import _STEP_TEXT, VERDICT_TEXT
    from pitstop.tune.result import COMBINE_STATUSES, STATUSES
    from pitstop.tune.verdict import VERDICT_OF

    assert set(VERDICT_OF) == set(get_args(DecisionStatus)) and set(VERDICT_OF.values()) <= set(STATUSES)
    assert set(VERDICT_TEXT) == set(STATUSES)
    assert set(_STEP_TEXT) == set(COMBINE_STATUSES)


def test_the_threads_knob_tries_fewer_intra_op_threads_on_cpu_and_sets_them_in_the_child():
    import torch

    knob = next(k for k in all_knobs() if k.tip == "PIT108")
    assert knob.name == "threads"
    assert knob.values(Context(num_threads=2, cpu_count=2)) == [1]
    assert knob.values(Context(num_threads=8, cpu_count=8)) == [4, 1]
    assert not knob.applies(Context(num_threads=1)) and "one intra-op thread" in knob.applies(Context(num_threads=1)).reason
    assert not knob.applies(Context(device="cuda", num_threads=8))
    assert Recipe(**knob.recipe_fields(1, CPU)).threads == 1
    assert "torch.set_num_threads(1)" in knob.snippet(1, CPU)
    before = torch.get_num_threads()
    try:
        knob.apply_in_child(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
