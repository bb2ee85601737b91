"""The adaptive timing of ``pitstop bench`` on a fake clock: warm-up once, blocks sized to the
budget, at least ``min_rounds`` rounds, a stop as soon as the verdict is decided, at the budget
or after ``max_rounds``, and the run budget shared over the benchmarks left. No real time is
measured here: every variant advances the fake clock by its cost."""

from __future__ import annotations

import pytest

from pitstop.bench import Benchmark, Claim, Outcome
from pitstop.bench.runner import run_one
from pitstop.bench.timing import MODES, BenchConfig, BenchContext, Mode, benchmark_budget
from pitstop.bench.verdict import settled
from pitstop.stats import RatioInterval


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.calls: dict[str, int] = {}

    def __call__(self) -> float:
        return self.now

    def variant(self, name: str, cost):
        """A variant that takes ``cost`` (seconds, or a function of its call number) per call."""
        def fn():
            k = self.calls.get(name, 0)
            self.calls[name] = k + 1
            self.now += cost(k) if callable(cost) else cost
        return fn


MODE = Mode("test", min_rounds=3, max_rounds=8, samples=3, budget=10.0, run_budget=None)


def _ctx(clock, settled_fn=None, budget=None):
    return BenchContext("cpu", MODE, budget=budget, settled=settled_fn, clock=clock)


def test_warm_up_once_then_blocks_sized_to_the_share_of_the_budget():
    clock = FakeClock()
    ctx = _ctx(clock, settled_fn=lambda ms: True)
    fast, slow = clock.variant("fast", 0.001), clock.variant("slow", 2.0)
    out = {m.name: m for m in ctx.time({"fast": fast, "slow": slow})}
    share = MODE.budget / (MODE.max_rounds * 2)  # 0.625 s per variant per round
    # fast: warm-up 1 call, then per round 3 blocks of share/3/0.001 = 208 calls
    assert clock.calls["fast"] == 1 + MODE.min_rounds * 3 * int(share / 3 / 0.001)
    # slow: longer than its share, so one call per block and one block per round
    assert clock.calls["slow"] == 1 + MODE.min_rounds
    assert out["fast"].samples == pytest.approx([0.001] * 9) and out["slow"].samples == pytest.approx([2.0] * 3)
    assert out["fast"].rounds == (0, 0, 0, 1, 1, 1, 2, 2, 2) and out["slow"].rounds == (0, 1, 2)
    (log,) = ctx.log
    assert log.rounds == MODE.min_rounds and "decided the verdict" in log.stopped


def test_a_decided_verdict_never_stops_before_min_rounds():
    clock = FakeClock()
    asked = []

    def decided(ms):
        asked.append(len(set(ms[0].rounds)))
        return True

    _ctx(clock, settled_fn=decided).time({"a": clock.variant("a", 0.01), "b": clock.variant("b", 0.01)})
    assert asked == [MODE.min_rounds]


def test_undecided_stops_at_the_budget_without_overrunning_it_by_more_than_a_round():
    clock = FakeClock()
    ctx = _ctx(clock, settled_fn=lambda ms: False, budget=4.0)
    ctx.time({"a": clock.variant("a", 0.3), "b": clock.variant("b", 0.4)})
    (log,) = ctx.log
    assert "budget" in log.stopped and MODE.min_rounds <= log.rounds < MODE.max_rounds
    assert log.seconds <= 4.0 and log.seconds == pytest.approx(clock.now)


def test_undecided_and_cheap_stops_after_max_rounds():
    clock = FakeClock()
    ctx = _ctx(clock)  # no predicate: never decided
    ctx.time({"a": clock.variant("a", 1e-4), "b": clock.variant("b", 1e-4)})
    assert ctx.log[0].rounds == MODE.max_rounds and "most rounds" in ctx.log[0].stopped
    assert clock.now <= MODE.budget * 1.05


def test_a_slow_first_call_is_re_estimated_after_the_first_round():
    clock = FakeClock()
    ctx = _ctx(clock, settled_fn=lambda ms: True)
    first_slow = clock.variant("a", lambda k: 5.0 if k == 0 else 0.001)  # e.g. a lazy init in the first call
    (m,) = ctx.time({"a": first_slow})
    assert m.rounds.count(0) == 1 and m.rounds.count(1) == 3  # round 0: one call; then blocks of many calls
    assert max(m.samples[1:]) == pytest.approx(0.001)


class _Claimed(Benchmark):  # no tip=: never registered
    title = "synthetic"
    claim = Claim(seed="002", text="b is faster", baseline="a", candidate="b")
    cost_b = 0.5

    def run(self, ctx):
        clock = ctx.clock
        return Outcome("fake", ctx.time({"a": clock.variant("a", lambda k: 0.01 * (1 + 0.3 * (k % 3 == 0))),
                                         "b": clock.variant("b", lambda k: 0.01 * self.cost_b * (1 + 0.3 * (k % 2)))}))


class _Tie(_Claimed):
    cost_b = 1.0


def test_the_runner_stops_a_clear_win_early_and_times_a_tie_longer():
    clock = FakeClock()
    ctx = BenchContext("cpu", "full", clock=clock)
    win = run_one(_Claimed, ctx, budget=8.0)
    assert win.verdict == "confirmed", win.reason
    assert f"timed in {MODES['full'].min_rounds} round(s)" in win.notes[-1] and "decided" in win.notes[-1]
    tie = run_one(_Tie, ctx, budget=8.0)
    assert tie.verdict == "not on this hardware", tie.reason
    rounds = len(set(tie.measurements[0].rounds))
    assert rounds > MODES["full"].min_rounds or "decided" in tie.notes[-1], tie.notes


@pytest.mark.parametrize("low, high, claimed, device, scope, decided", [
    (1.2, 1.5, None, "cpu", "any", True),     # a clear win
    (1.2, 1.5, 2.0, "cpu", "any", True),      # a clear win wholly short of 0.9 x the claimed 2x
    (1.7, 2.1, 2.0, "cpu", "any", False),     # straddles 1.8 = 0.9 x 2: could still go either way
    (1.9, 2.1, 2.0, "cpu", "any", True),      # reaches the claim
    (0.5, 0.9, None, "cpu", "any", True),     # a clear loss
    (0.97, 1.03, None, "cpu", "any", True),   # a tie inside the margin
    (0.9, 1.3, None, "cpu", "any", False),    # noise across the margin
    (1.0, 1.08, None, "cpu", "any", False),   # across 1.05
    (0.9, 1.3, None, "cpu", "gpu", True),     # a GPU claim on a CPU: capped whatever the numbers
    (0.9, 1.3, None, "cuda", "gpu", False),   # ... but judged on a GPU
])
def test_settled_means_no_more_samples_can_change_the_verdict(low, high, claimed, device, scope, decided):
    r = RatioInterval((low + high) / 2, low, high, 0.95)
    assert settled(r, claimed, device=device, scope=scope) is decided


def test_exact_claims_are_settled_at_once():
    assert settled(RatioInterval(2.0, 2.0, 2.0, 1.0), 2.0, device="cpu", kind="exact")


def test_the_run_budget_is_shared_over_the_benchmarks_left():
    full = MODES["full"]
    assert benchmark_budget(full, None, 100.0, 3) == full.budget  # no run target: the mode's budget
    assert benchmark_budget(full, 75.0, 0.0, 11) == pytest.approx(75 / 11)  # a fair share below the cap
    assert benchmark_budget(full, 75.0, 0.0, 2) == full.budget  # capped by the mode's budget
    assert benchmark_budget(full, 75.0, 74.0, 5) == full.budget * full.floor  # late: the floor, never zero
    assert BenchConfig().run_budget == full.run_budget and BenchConfig(budget=30).run_budget == 30
    with pytest.raises(ValueError, match="budget"):
        BenchConfig(budget=0)


def test_cli_refuses_a_budget_that_is_not_positive(cli):
    out = cli("bench", "PIT402", "--budget", "0")
    assert out.returncode == 2 and "--budget must be > 0" in out.stderr
