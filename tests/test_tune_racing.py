"""The racing scheduler and the planned budget on a fake runner with a fake clock (no training,
no timing): the big win decided first, a slow-setup trial after it or reported as not fitting,
the one-time compile cost apart, honest "not decided: budget" end states."""

from __future__ import annotations

import io
import json
import math
import random

import pytest

from pitstop.jsoncodec import dumps
from pitstop.tune.knob import Context, Knob
from pitstop.tune.options import TuneOptions
from pitstop.tune.protocol import search
from pitstop.tune.schedule.racing import Prior, pairs_to_verdict, pooled_noise, prior_of, rank
from pitstop.tune.result import Run


class _Fake(Knob, register=False):
    modes = ("api",)
    factor = 1.0        # step time multiplier
    field = "channels_last"
    compile_s = 0.0     # added to the first warm-up step of the configuration's first run (cold compile)
    cached_s = 0.0      # ... of its later runs (Inductor's cache warm)

    def recipe_fields(self, value, ctx):
        return {self.field: True}


def _knob(name, tip, factor, field, **kw):
    return type(name, (_Fake,), {"name": name, "title": name, "factor": factor, "field": field, **kw},
                tip=tip, register=False)()


class ClockedBackend:
    """Runs on a fake clock: a run takes ``setup`` seconds plus its steps (step time 0.1 s times
    the knobs' factors, times log-normal noise of ``noise``), plus a compiling knob's compile time
    in its first warm-up step; a run longer than its timeout is cut there (status timeout)."""

    mode, target = "api", "fake"

    def __init__(self, knobs, *, noise=0.05, setup=1.5, seed=1):
        self.by_name = {k.name: k for k in knobs}
        self.noise, self.setup = noise, setup
        self.rng = random.Random(seed)
        self.now = 0.0
        self.calls: list[tuple[tuple[str, ...], float]] = []   # (knobs, start time)
        self.seen: set[tuple[str, ...]] = set()

    def budget_clock(self):
        return self.now

    def context(self):
        return Context(mode="api")

    def run(self, settings, knobs, *, round, timeout, steps, warmup):
        names = tuple(s.knob for s in settings)
        self.calls.append((names, self.now))
        step = 0.1 * math.prod(self.by_name[n].factor for n in names) * math.exp(self.rng.gauss(0.0, self.noise))
        extra = sum(self.by_name[n].cached_s if names in self.seen else self.by_name[n].compile_s for n in names)
        self.seen.add(names)
        warm = [step + extra] + [step] * (warmup - 1)
        elapsed = self.setup + sum(warm) + step * steps
        if elapsed > timeout:
            self.now += timeout
            return Run("timeout", elapsed=timeout, message=f"timed out after {timeout:g} s")
        self.now += elapsed
        return Run("ok", step_times=[step] * steps, warmup_times=warm, losses=[1.0] * (warmup + steps),
                   elapsed=elapsed, round=round)

    def close(self):
        """Nothing to release: no process was started."""


def _issue_knobs():
    cheap = _knob("cheap", "PIT951", 1 / 1.5, "channels_last")                   # 1.5x, no set-up of its own
    slow = _knob("slow", "PIT952", 1 / 1.04, "compile", expensive=True, compile_s=18.0, cached_s=2.5)  # 1.04x
    return cheap, slow


def test_under_a_budget_of_about_eight_runs_the_big_cheap_win_is_decided_and_the_slow_trial_does_not_crowd_it():
    """A 1.5x trick (5% noise) and a compile-like 1.04x trick whose first run takes 20 s, a budget
    of about 8 baseline runs: the 1.5x trick is kept with a decided interval; the slow one runs
    only after it was decided, or is reported as not fitting, with the plan saying so up front."""
    cheap, slow = _issue_knobs()
    backend = ClockedBackend([cheap, slow])
    run_s = 1.5 + 0.1 * 13
    r = search(backend, [cheap, slow], TuneOptions(steps=10, warmup=3, budget=8 * run_s))
    c, s = r.trial("cheap"), r.trial("slow")
    assert c.status == "kept" and c.speed.status == "faster" and c.speed.low > 1.05
    assert c.speed.ratio == pytest.approx(1.5, rel=0.1)
    decided_at = [t for names, t in backend.calls if names == ("cheap",)][c.speed.pairs - 1]
    slow_runs = [t for names, t in backend.calls if "slow" in names]
    assert all(t > decided_at for t in slow_runs)  # after the cheap one's verdict, if at all
    if not slow_runs:
        assert s.status == "skipped" and "not measured" in s.reason
    plan = r.budget.plan
    assert plan is not None and plan.budget == pytest.approx(8 * run_s)
    item = {i.trick: i for i in plan.items}
    assert item["cheap"].fits and item["cheap"].stage == "alone"
    assert item["slow"].stage == "on the path" and item["slow"].one_time_s > 0
    assert not item["slow"].fits and "would be left" in item["slow"].why
    assert backend.now <= 8 * run_s + 1e-9 and r.best is not None and r.best.name == "cheap"


def test_the_plan_and_the_one_time_compile_cost_are_in_the_json_and_the_text():
    from pitstop.report.tune_terminal import render_text

    cheap, slow = _issue_knobs()
    fast_compile = _knob("slow", "PIT952", 0.7, "compile", expensive=True, compile_s=18.0, cached_s=2.5)
    backend = ClockedBackend([cheap, fast_compile])
    r = search(backend, [cheap, fast_compile], TuneOptions(steps=10, warmup=3, budget=150))
    comp = r.trial("slow")
    assert comp.against == "cheap" and comp.runs  # measured on top of the path, not alone
    assert comp.compile.compile_s == pytest.approx(18.0, abs=0.5)             # the cold first run, once
    assert comp.compile.compile_s_cached == pytest.approx(2.5, abs=0.5)
    if comp.status == "kept":  # 0.7x of the path's step: 18 s pay off after ceil(18 / (0.067 * 0.3)) steps
        assert comp.compile.break_even_steps == pytest.approx(18.0 / (0.1 / 1.5 * 0.3), rel=0.15)
    d = json.loads(dumps(r.to_dict()))
    assert d["budget"]["plan"]["budget"] == 150 and d["budget"]["plan"]["run_s"] > 0
    assert [i["trick"] for i in d["budget"]["plan"]["items"]] == ["cheap", "slow"]
    assert d["budget"]["plan"]["items"][1]["stage"] == "on the path"
    tj = next(t for t in d["trials"] if t["name"] == "slow")
    assert tj["compile"]["compile_s"] == pytest.approx(18.0, abs=0.5) and tj["against"] == "cheap"
    assert {t["trial"] for t in d["time"]["trials"]} >= {"baseline", "cheap", "cheap + slow"}
    buf = io.StringIO()
    render_text(r, file=buf, width=250)
    text = buf.getvalue()
    assert "plan (before measuring): budget 150 s" in text
    assert "1. cheap" in text and "2. slow, on top of the path" in text
    assert "compile 18.0 s once" in text


def test_a_budget_that_stops_a_noisy_leader_names_it_with_its_interval_and_the_budget_a_verdict_needs():
    lead = _knob("lead", "PIT953", 1 / 1.25, "channels_last")
    other = _knob("other", "PIT954", 1 / 1.1, "cudnn_benchmark")
    backend = ClockedBackend([lead, other], noise=0.25, seed=3)
    r = search(backend, [lead, other], TuneOptions(steps=10, warmup=3, budget=22))
    open_ = [t for t in r.trials if t.speed is not None and t.speed.status == "undecided"]
    assert r.budget.exhausted and open_
    note = next(n for n in r.notes if n.startswith("the time budget ran out"))
    leader = max(open_, key=lambda t: t.speed.ratio)
    sp = leader.speed
    assert f"the leader {leader.name} {sp.ratio:.2f}x [{sp.low:.2f}, {sp.high:.2f}] after {sp.pairs} pair" in note
    if leader.to_decide is not None:
        assert f"about {leader.to_decide.pairs} more pair" in note and "--budget" in note
        assert leader.to_decide.seconds > 0 and "would decide it" in leader.reason


def test_without_a_budget_the_leader_is_driven_to_its_verdict_before_a_long_shot_gets_a_second_pair():
    big = _knob("big", "PIT955", 0.5, "channels_last")
    long_shot = _knob("long", "PIT956", 1.02, "cudnn_benchmark")
    backend = ClockedBackend([big, long_shot], noise=0.02)
    r = search(backend, [big, long_shot], TuneOptions(steps=10, warmup=3))
    assert r.trial("big").status == "kept"
    singles = [names for names, _ in backend.calls if len(names) == 1]
    big_done = [i for i, n in enumerate(singles) if n == ("big",)][r.trial("big").speed.pairs - 1]
    assert singles[:big_done + 1].count(("long",)) <= 1   # at most its first pair before the leader's verdict


def test_the_scheduler_math():
    # a larger measured gain ranks first; a candidate sitting at the bar last
    logs = {"a": [math.log(1.5)] * 2, "b": [math.log(1.0), math.log(1.02)], "c": []}
    ranked = rank(list(logs), logs=logs.get, prior=lambda c: 1.2, pair_cost=lambda c: 3.0, one_time=lambda c: 0.0,
                  cap=lambda c: 8, bar=1.05, confidence=0.9, min_pairs=3)
    assert [c for c, _ in ranked] == ["a", "c", "b"]
    assert ranked[0][1].more == 1 and ranked[2][1].expected < 1.05
    # a one-time cost not paid yet lowers the score per second
    slow = rank(["c"], logs=logs.get, prior=lambda c: 1.2, pair_cost=lambda c: 3.0, one_time=lambda c: 20.0,
                cap=lambda c: 8, bar=1.05, confidence=0.9, min_pairs=3)[0][1]
    assert slow.seconds == pytest.approx(ranked[1][1].seconds + 20.0) and slow.score < ranked[1][1].score
    # more spread, more pairs; a gain on the bar is never forecast to decide
    quiet = pairs_to_verdict([0.3, 0.31], prior=1, bar=1.05, confidence=0.9, min_pairs=3, cap=50, noise=0.05)
    noisy = pairs_to_verdict([0.1, 0.5], prior=1, bar=1.05, confidence=0.9, min_pairs=3, cap=50, noise=0.05)
    assert quiet == 3 and noisy > quiet
    assert pairs_to_verdict([math.log(1.05)] * 3, prior=1, bar=1.05, confidence=0.9, min_pairs=3, cap=50,
                            noise=0.05) is None
    assert pooled_noise([[0.0, 0.1], [1.0]]) == pytest.approx(math.sqrt(0.005))
    # priors: halving the phases the survey measured, or the bench's measured ratio (Amdahl-scaled)
    assert prior_of(0.8).ratio == pytest.approx(1 / 0.6) and "80%" in prior_of(0.8, phases=("forward",)).source
    bench = prior_of(0.5, 3.0, phases=("forward",))
    assert isinstance(bench, Prior) and bench.ratio == pytest.approx(1 / (0.5 + 0.5 / 3)) and "bench" in bench.source


def test_a_cheap_tricks_start_up_is_its_one_time_cost_with_the_steps_it_takes_to_pay_off():
    from pitstop.report.tune_terminal import render_text

    workers = _knob("workers", "PIT957", 0.8, "channels_last", compile_s=0.9, cached_s=0.9)  # every run starts them
    plain = _knob("plain", "PIT958", 0.8, "cudnn_benchmark")
    r = search(ClockedBackend([workers, plain], noise=0.01), [workers, plain], TuneOptions(steps=10, warmup=3))
    w, p = r.trial("workers"), r.trial("plain")
    assert p.startup is None and w.status == "kept"
    assert w.startup.extra_s == pytest.approx(0.9, abs=0.05)
    # 0.1 s baseline step, 0.08 s with the trick: 0.02 s saved per step
    assert w.startup.break_even_steps == pytest.approx(0.9 / 0.02, rel=0.1)
    assert json.loads(dumps(r.to_dict()))["trials"][0]["startup"]["extra_s"] == pytest.approx(0.9, abs=0.05)
    buf = io.StringIO()
    render_text(r, file=buf, width=300)
    assert "start-up 0.9 s more warm-up per run than its reference, pays off after" in buf.getvalue()


def test_more_steps_only_where_set_up_dominates_and_only_while_the_budget_keeps_room():
    from pitstop.tune.schedule.costs import MORE_STEPS, steps_for

    def survey(setup, step, n=5):  # the survey as a run: its set-up inside the first warm-up step
        return Run("ok", step_times=[step] * n, warmup_times=[setup + step], elapsed=setup + step * (n + 1))

    assert steps_for(survey(0.2, 0.1), 10, math.inf) == (10, None)          # measuring already dominates
    steps, why = steps_for(survey(15.0, 0.1), 10, math.inf)                 # a GPU run: 15 s of set-up
    assert steps == 10 * MORE_STEPS and "15.1 s on set-up and warm-up" in why
    assert steps_for(survey(3.0, 0.1), 10, math.inf)[0] == 31               # as many steps as the set-up holds
    assert steps_for(survey(15.0, 0.1), 10, 160.0) == (10, None)            # 12 runs of 15 s do not fit 160 s
    assert steps_for(survey(3.0, 0.1), 10, 60.0)[0] == int((60 / 12 - 3.1) / 0.1)  # 12 runs still fit 60 s


def test_the_set_up_split_from_the_childs_marks():
    from pitstop.tune.script import setup_split

    run = Run("ok", step_times=[0.1] * 4, warmup_times=[2.0], elapsed=3.0)
    marks = {"script": 10.5, "imports": 0.3, "forward": 11.5, "step": 12.0}
    sp = setup_split(marks, 10.0, run)
    assert (sp.start, sp.imports, sp.build, sp.compile) == pytest.approx((0.5, 0.3, 0.7, 0.0))
    assert sp.first_step == pytest.approx(0.4)  # forward to the end of step 1, less a steady step
    assert setup_split({"script": 10.5}, 10.0, run) is None  # no training forward marked


def test_a_bench_report_measured_on_this_device_orders_the_measuring(tmp_path):
    from pitstop.tune.options import read_bench_priors

    report = {"device": {"device": "cpu", "cpu_model": "AMD EPYC", "gpu": None},
              "results": [{"code": "PIT954", "ratio": {"ratio": 3.0, "low": 2.8, "high": 3.2}, "error": None},
                          {"code": "PIT953", "ratio": None, "error": "skipped"}]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report))
    priors = read_bench_priors(str(path))
    assert [(b.code, b.ratio, b.device, b.device_name) for b in priors] == [("PIT954", 3.0, "cpu", "AMD EPYC")]
    lead = _knob("lead", "PIT953", 1 / 1.25, "channels_last")
    other = _knob("other", "PIT954", 1 / 1.25, "cudnn_benchmark")
    backend = ClockedBackend([lead, other], noise=0.01)
    r = search(backend, [lead, other], TuneOptions(steps=10, warmup=3, bench=priors))
    first = r.budget.plan.items[0]
    assert first.trick == "other" and "pitstop bench measured 3.00x" in first.prior.source
    assert backend.calls[1][0] == ("other",)  # the bench's measured win runs first
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="bad.json: not a pitstop bench JSON report"):
        read_bench_priors(str(tmp_path / "bad.json"))


def test_a_trick_under_one_decided_faster_stops_alone_and_is_measured_again_on_top_of_its_path():
    big = _knob("big", "PIT959", 0.5, "channels_last")
    mid = _knob("mid", "PIT960", 1 / 1.1, "cudnn_benchmark")
    backend = ClockedBackend([big, mid], noise=0.08, seed=5)
    r = search(backend, [big, mid], TuneOptions(steps=10, warmup=3))
    m = r.trial("mid")
    assert r.trial("big").status == "kept"
    if m.speed.status == "undecided":  # decided in its first pairs, it would not need the rule
        assert m.speed.pairs == 3 and "stopped: under big" in m.reason
        assert any(c.added == "mid" for c in r.combination)  # measured again on top of big
        assert [n for n, _ in backend.calls].count(("mid",)) == 3
