"""Cheap tricks measured again once compilation joins the path, on a fake runner whose step time
is ``max(data, compute)``: compiling halves the compute, so DataLoader workers (which hide the
data wait) show nothing alone and nothing on top of the cheap path, and pay only once compiled
code computes faster than the batches arrive."""

from __future__ import annotations

import pytest

from pitstop.tune.options import TuneOptions
from pitstop.tune.protocol import search
from tune_fakes import BottleneckBackend, fake_knob


make = fake_knob


class MaxBackend(BottleneckBackend):
    """data 0.05 s, compute 0.20 s at the baseline; each knob scales one of them."""

    def __init__(self, knobs, shares=(("data", 0.2), ("forward", 0.3), ("backward", 0.5))):
        super().__init__(knobs, data=0.05, compute=0.20, shares=shares)


def knobs():
    amp = make("amp", "PIT971", field="channels_last", phases=("forward", "backward"), compute=0.4)
    workers = make("workers", "PIT972", field="cudnn_benchmark", phases=("data",), data=0.25)
    compile_ = make("compile", "PIT973", field="pin_memory", phases=("forward", "backward"), compute=0.5, expensive=True)
    return amp, workers, compile_


def tune(ks, **opts):
    backend = MaxBackend(ks)
    options = TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5, **opts)
    return search(backend, ks, options), backend


def test_workers_join_the_path_only_on_top_of_compile():
    r, backend = tune(list(knobs()))
    assert r.trial("workers").status in ("no_gain", "slower")  # alone: the compute hides the data wait
    assert [s.trick for s in r.stages] == ["amp", "compile", "workers"], [c.to_dict() for c in r.combination]
    steps = [(c.added, c.status) for c in r.combination]
    # on top of amp alone the workers show nothing; on top of amp + compile they are added
    assert ("workers", "no_gain") in steps and steps.index(("workers", "no_gain")) < steps.index(("compile", "added"))
    last = r.stages[-1]
    assert last.speed.ratio == pytest.approx(0.05 / 0.04, rel=0.02)  # paired against amp + compile
    assert last.cumulative == pytest.approx(0.20 / 0.04, rel=0.03)
    assert {s.knob for s in r.best.settings} == {"amp", "compile", "workers"}
    assert r.best.speed.ratio == pytest.approx(0.20 / 0.04, rel=0.03)  # confirmed vs the untouched baseline
    assert any(set(c) == {"amp", "compile", "workers"} for c in backend.calls)


def test_without_compile_added_the_cheap_tricks_get_no_second_look():
    amp, workers, _ = knobs()
    slow_compile = make("compile", "PIT973", field="pin_memory", phases=("forward", "backward"), compute=1.3,
                        expensive=True)  # slower alone and on top: never added
    r, backend = tune([amp, workers, slow_compile])
    assert [s.trick for s in r.stages] == ["amp"]
    assert [c.added for c in r.combination].count("workers") == 1  # measured once on top of amp, not again
    assert not any("compile" in c and "workers" in c for c in backend.calls)


def test_a_cheap_trick_that_failed_on_the_path_is_not_measured_again_after_compile():
    amp, workers, compile_ = knobs()

    class Failing(MaxBackend):
        def run(self, settings, knobs, **kw):
            run = super().run(settings, knobs, **kw)
            if {s.knob for s in settings} == {"amp", "workers"}:
                run.status, run.message = "error", "planted failure on top of amp"
            return run

    backend = Failing([amp, workers, compile_])
    r = search(backend, [amp, workers, compile_], TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5))
    assert [s.trick for s in r.stages] == ["amp", "compile"]
    assert not any(set(c) == {"amp", "compile", "workers"} for c in backend.calls)


class Clocked(MaxBackend):
    """Each run takes 0.1 s on a fake clock (the budget's clock), whatever its step time."""

    def __init__(self, knobs):
        super().__init__(knobs)
        self.now, self.started = 0.0, []

    def budget_clock(self):
        return self.now

    def run(self, settings, knobs, **kw):
        self.started.append(self.now)
        out = super().run(settings, knobs, **kw)
        out.elapsed = 0.1
        self.now += out.elapsed
        return out


def test_the_budget_bounds_the_stages_after_compile():
    ks = list(knobs())
    full = Clocked(ks)
    search(full, ks, TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5))
    assert any(set(c) == {"amp", "compile", "workers"} for c in full.calls)  # no budget: workers on top of compile
    # the smallest budget (in 0.1 s) at which compile joins the path: the workers' stage on top of it
    # does not fit (the plan's forecast of its verdict), and no search runs past its budget
    for tenths in range(5, round(full.now * 20)):
        cut = Clocked(ks)
        r = search(cut, ks, TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5, budget=tenths / 10))
        assert cut.now <= tenths / 10 + 1e-9
        if [s.trick for s in r.stages] == ["amp", "compile"]:
            break
    else:
        raise AssertionError("no budget put compile on the path without the workers on top of it")
    assert r.budget.exhausted
    assert not any(set(c) == {"amp", "compile", "workers"} for c in cut.calls)
    assert [c.status for c in r.combination if c.added == "workers"][-1] == "skipped"
