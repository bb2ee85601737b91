"""The verdict rule on synthetic measurements: a noisy tie is never confirmed, a clear win is,
a clear loss is refuted, a win below the claimed size is "not on this hardware"."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pitstop import catalog, stats
from pitstop.bench import CONFIRMED, NOT_HERE, REFUTED, Benchmark, Claim, Measurement, Outcome
from pitstop.bench.runner import _evaluate
from pitstop.bench.verdict import SKIPPED, Verdict, judge, judge_exact, judge_scope, judge_speedup


def _noisy(center: float, n: int = 30, spread: float = 0.03, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def _ratio(base, cand):
    return stats.ratio_interval(base, cand, confidence=0.95)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=1e-4, max_value=10.0), min_size=3, max_size=25), st.randoms())
def test_a_tie_is_never_confirmed_whatever_the_noise(samples, rnd):
    shuffled = list(samples)
    rnd.shuffle(shuffled)  # the same samples in another order, each moved by up to 3%: a tie within noise
    shuffled = [x * rnd.uniform(0.97, 1.03) for x in shuffled]
    for claimed in (None, 2.0):
        v = judge_speedup(_ratio(samples, shuffled), claimed)
        assert v.verdict != CONFIRMED, v


def test_a_small_real_difference_inside_the_margin_is_a_tie():
    base = _noisy(1.0, spread=0.005)
    v = judge_speedup(_ratio(base, [x / 1.03 for x in base]), None)  # 3% faster, resolved, but < 5%
    assert v.verdict == NOT_HERE and "no clear difference" in v.reason


def test_very_noisy_samples_with_a_better_median_are_not_confirmed():
    base = [1.0, 1.0, 1.0, 5.0, 0.2]
    cand = [0.7, 3.0, 0.1, 0.8, 2.0]   # median 0.8 vs 1.0, but the spread swamps it
    v = judge_speedup(_ratio(base, cand), None)
    assert v.verdict == NOT_HERE and "wide" in v.reason


def test_a_clear_win_is_confirmed_and_a_clear_loss_refuted():
    base = _noisy(1.0)
    assert judge_speedup(_ratio(base, _noisy(0.5, seed=1)), None).verdict == CONFIRMED
    assert judge_speedup(_ratio(base, _noisy(0.5, seed=1)), 2.0).verdict == CONFIRMED
    loss = judge_speedup(_ratio(base, _noisy(1.5, seed=2)), None)
    assert loss.verdict == REFUTED and "slower" in loss.reason


def test_a_win_below_the_claimed_size_is_not_on_this_hardware():
    base = _noisy(1.0)
    v = judge_speedup(_ratio(base, _noisy(1 / 1.5, seed=3)), 3.0)  # a real 1.5x against a claimed 3x
    assert v.verdict == NOT_HERE and "short of the claimed 3x" in v.reason


@pytest.mark.parametrize("measured,verdict", [(1.85, CONFIRMED), (1.80, CONFIRMED), (1.70, NOT_HERE)])
def test_claimed_size_is_met_within_ten_percent(measured, verdict):
    base = _noisy(1.0, spread=0.002)
    assert judge_speedup(_ratio(base, [x / measured for x in base]), 2.0).verdict == verdict


def test_a_failed_check_refutes_even_a_clear_win():
    r = _ratio(_noisy(1.0), _noisy(0.1, seed=4))
    v = judge("speedup", None, r, device="cpu", checks={"shares memory": False, "other": True})
    assert v.verdict == REFUTED and "shares memory" in v.reason and "other" not in v.reason


def test_exact_claims_match_within_tolerance_or_are_refuted():
    assert judge_exact({"Adam": 2.00001, "SGD": 0.0}, {"Adam": 2.0, "SGD": 0.0}).verdict == CONFIRMED
    v = judge_exact({"Adam": 2.0, "SGD": 1.0}, {"Adam": 2.0, "SGD": 0.0})
    assert v.verdict == REFUTED and "SGD" in v.reason
    assert judge_exact({"x": 0.01}, {"x": 0.0}).verdict == CONFIRMED   # absolute tolerance near zero
    assert judge_exact({"x": 0.05}, {"x": 0.0}).verdict == REFUTED
    with pytest.raises(ValueError, match="no measurement"):
        judge_exact({}, {"Adam": 2.0})


def test_claims_are_validated():
    with pytest.raises(ValueError, match="> 1"):
        Claim(seed="001", text="t", baseline="a", candidate="b", ratio=0.5)
    with pytest.raises(ValueError, match="baseline"):
        Claim(seed="001", text="t", candidate="b")
    with pytest.raises(ValueError, match="claimed value"):
        Claim(seed="001", text="t", candidate="b", kind="exact")
    with pytest.raises(ValueError, match="kind"):
        Claim(seed="001", text="t", baseline="a", candidate="b", kind="guess")
    with pytest.raises(ValueError, match="scope"):
        Claim(seed="001", text="t", baseline="a", candidate="b", scope="tpu")


def test_a_broken_benchmark_is_refused_before_it_registers():
    before = list(catalog.implementations("B"))
    with pytest.raises(TypeError, match="claim"):
        type("NoClaim", (Benchmark,), {"title": "t", "run": lambda self, ctx: None}, tip="PIT607")
    with pytest.raises(TypeError, match="run"):
        type("NoRun", (Benchmark,), {"title": "t", "claim": Claim(seed="002", text="t", baseline="a",
                                                                   candidate="b")}, tip="PIT607")
    assert catalog.implementations("B") == before


class _Pooled(Benchmark):  # no tip=: never registered
    title = "pooled"
    claim = Claim(seed="001", text="t", baseline=("odd 1", "odd 2"), candidate=("even 1", "even 2"))


def test_pooled_ratio_compares_time_per_unit_of_work():
    # "odd" sizes take 2 s per unit of work, "even" sizes 1 s per unit, whatever their size
    out = Outcome("w", [Measurement("odd 1", (4.0, 4.0), work=2.0), Measurement("odd 2", (6.0, 6.0), work=3.0),
                        Measurement("even 1", (2.0, 2.0), work=2.0), Measurement("even 2", (3.0, 3.0), work=3.0)])
    ratio, verdict, _ = _evaluate(_Pooled, out, "cpu")
    assert ratio.ratio == pytest.approx(2.0) and verdict.verdict == CONFIRMED


def test_measurement_rates_and_validation():
    m = Measurement("mm", (0.5, 0.5, 1.0), work=2e9, work_unit="FLOP")
    assert m.rate() == pytest.approx(4e9) and m.rate_unit() == "FLOP/s"
    b = Measurement("Adam", (8.0,), unit="B", work=4.0, work_unit="param bytes")
    assert b.rate() == 2.0 and b.rate_unit() == "x param bytes"
    with pytest.raises(ValueError):
        Measurement("empty", ())
    with pytest.raises(ValueError):
        Measurement("w", (1.0,), work=0.0)
    assert math.isnan(Measurement("x", (1.0,)).rate() or math.nan)


def test_rounds_that_disagree_are_not_a_clear_win():
    from pitstop.stats import round_ratio_interval

    # Within each round the samples are tight, but the rounds disagree (load bursts):
    # round 0: candidate 1.6x faster, round 1: 0.8x, round 2: 1.3x.
    base, cand = [], []
    for r, speedup in enumerate((1.6, 0.8, 1.3)):
        base += [(r, 1.0 + 0.001 * i) for i in range(20)]
        cand += [(r, (1.0 + 0.001 * i) / speedup) for i in range(20)]
    naive = stats.ratio_interval([v for _, v in base], [v for _, v in cand], confidence=0.95)
    by_round = round_ratio_interval(base, cand, confidence=0.95)
    assert naive.low > 1.05   # the sample bootstrap would call this a clear win...
    assert by_round.low < 1.0 < by_round.high  # ...the round bootstrap sees the disagreement
    assert judge_speedup(by_round, None).verdict == NOT_HERE


def test_rounds_that_agree_keep_a_tight_interval():
    from pitstop.stats import round_ratio_interval

    base = [(r, 1.0 + 0.01 * ((r + i) % 3)) for r in range(5) for i in range(6)]
    cand = [(r, v / 2) for r, v in base]
    r = round_ratio_interval(base, cand)
    assert r.ratio == pytest.approx(2.0) and 1.9 < r.low <= r.high < 2.1
    one_round = round_ratio_interval([(0, 1.0), (0, 1.1)], [(0, 0.5), (0, 0.55)])  # falls back to samples
    assert one_round.ratio == pytest.approx(2.0)


# -- the scope rule: a claim about GPUs is never confirmed or refuted off a GPU ----------

_CASES = [
    pytest.param("a clear 3x win", _noisy(1.0), _noisy(1 / 3, seed=5), CONFIRMED, id="win"),
    pytest.param("a clear loss", _noisy(1.0), _noisy(1 / 0.8, seed=6), REFUTED, id="loss"),
    pytest.param("a win short of 3x", _noisy(1.0), _noisy(1 / 1.5, seed=7), NOT_HERE, id="short"),
]


@pytest.mark.parametrize("label,base,cand,uncapped", _CASES)
def test_a_gpu_claim_measured_on_cpu_is_capped_with_its_numbers_shown(label, base, cand, uncapped):
    r = _ratio(base, cand)
    plain = judge("speedup", 3.0, r, device="cpu")
    assert plain.verdict == uncapped, (label, plain)        # rules 1-4 alone
    on_gpu = judge("speedup", 3.0, r, device="cuda", scope="gpu")
    assert on_gpu == plain                                   # on CUDA the scope changes nothing
    capped = judge("speedup", 3.0, r, device="cpu", scope="gpu")
    assert capped.verdict == NOT_HERE
    assert capped.reason.startswith("the claim is about GPUs; measured here on CPU: ")
    assert plain.reason in capped.reason and f"{r.ratio:.2f}x" in capped.reason  # the numbers are still there


def test_the_scope_caps_failed_checks_and_exact_claims_but_never_a_skip():
    r = _ratio(_noisy(1.0), _noisy(0.5, seed=8))
    failed = judge("speedup", None, r, device="cpu", scope="gpu", checks={"ran on tensor cores": False})
    assert failed.verdict == NOT_HERE and "failed check: ran on tensor cores" in failed.reason
    exact = judge("exact", 2.0, r, device="cpu", scope="gpu", exact_values={"Adam": 2.0}, exact_claims={"Adam": 2.0})
    assert exact.verdict == NOT_HERE and "as claimed" in exact.reason
    skip = Verdict(SKIPPED, "needs CUDA")
    assert judge_scope(skip, "gpu", "cpu") == skip
    with pytest.raises(ValueError, match="scope"):
        judge_scope(skip, "tpu", "cpu")


class _GpuClaim(Benchmark):  # no tip=: never registered
    title = "gpu claim"
    claim = Claim(seed="001", text="t on GPUs", baseline="a", candidate="b", ratio=2.0, scope="gpu")


def test_the_runner_caps_a_gpu_claim_by_the_device_it_measured_on():
    out = Outcome("w", [Measurement("a", tuple(_noisy(1.0))), Measurement("b", tuple(_noisy(0.5, seed=9)))])
    ratio, on_cpu, _ = _evaluate(_GpuClaim, out, "cpu")
    _, on_cuda, _ = _evaluate(_GpuClaim, out, "cuda")
    assert ratio.ratio == pytest.approx(2.0, rel=0.05)
    assert on_cuda.verdict == CONFIRMED
    assert on_cpu.verdict == NOT_HERE and f"measured here on CPU: {ratio.ratio:.2f}x faster" in on_cpu.reason
