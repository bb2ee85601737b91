"""The tune session's protocol on a fake backend (no training, no timing): paired adaptive
passes, the combination re-measured, contradictions the report must not show."""

from __future__ import annotations

import pytest

from pitstop.tune.knob import Context, Knob
from pitstop.tune.options import TuneOptions
from pitstop.tune.result import Run
from pitstop.tune.search import search


class _Fake(Knob, register=False):
    modes = ("api",)
    factor = 1.0      # step time multiplier
    field = "channels_last"
    expensive_warmup = 0.0

    def recipe_fields(self, value, ctx):
        return {self.field: True}


def _knob(name, tip, factor, field, **kw):
    return type(name, (_Fake,), {"name": name, "title": name, "factor": factor, "field": field, **kw},
                tip=tip, register=False)()


class FakeBackend:
    """Step time 0.1 s times the factors of the knobs on; a deterministic, tiny jitter."""

    mode, target = "api", "fake"

    def __init__(self, knobs, interactions=None):
        self.by_name = {k.name: k for k in knobs}
        self.interactions = interactions or {}   # frozenset of knob names -> step time
        self.calls: list[tuple[str, ...]] = []

    def context(self):
        return Context(mode="api")

    def run(self, settings, knobs, *, round, timeout, steps, warmup):
        names = tuple(s.knob for s in settings)
        self.calls.append(names)
        t = 0.1
        for n in names:
            t *= self.by_name[n].factor
        t = self.interactions.get(frozenset(names), t)
        jitter = 1 + 0.002 * ((len(self.calls) * 7) % 5 - 2)
        warm = [t * jitter + sum(self.by_name[n].expensive_warmup for n in names)] * warmup
        return Run("ok", step_times=[t * jitter] * steps, warmup_times=warm, losses=[1.0] * (warmup + steps),
                   elapsed=t * (steps + warmup), round=round)

    def close(self):
        pass


def _search(knobs, interactions=None, **opts):
    backend = FakeBackend(knobs, interactions)
    return search(backend, knobs, TuneOptions(steps=4, warmup=1, **opts)), backend


def test_a_clear_effect_decides_in_min_pairs_and_a_tie_uses_the_budgeted_pairs():
    fast, tie = _knob("fast", "PIT981", 0.5, "channels_last"), _knob("tie", "PIT982", 1.0, "cudnn_benchmark")
    r, backend = _search([fast, tie], repeats=3, max_pairs=6)
    f, t = r.trial("fast"), r.trial("tie")
    assert f.status == "kept" and f.speed.pairs == 3 and f.speed.ratio == pytest.approx(2.0, rel=0.02)
    assert t.status == "no_gain" and t.speed.pairs >= 3  # decided "same" (cannot reach 1.05x) or undecided
    assert len(f.runs) == 3  # it stopped once decided (the combination's runs are not the trial's)


def test_the_combination_is_re_measured_against_the_baseline_and_reported_consistently():
    a, b = _knob("a", "PIT983", 0.5, "channels_last"), _knob("b", "PIT984", 0.6, "cudnn_benchmark")
    r, backend = _search([a, b], repeats=3, max_pairs=5)
    trials_before = [t.name for t in r.trials]
    assert [s.status for s in r.combination] == ["added", "added", "confirmed"]
    assert r.best is not None and {s.knob for s in r.best.settings} == {"a", "b"}
    assert r.best.speed.ratio == pytest.approx(1 / 0.3, rel=0.03) and r.best.speed.status == "faster"
    assert trials_before == [t.name for t in r.trials] == ["a", "b"]  # the caller's trials untouched
    assert ("a", "b") in backend.calls or ("b", "a") in backend.calls
    assert r.to_dict()["best"]["speedup"]["ratio"] == pytest.approx(r.best.speed.ratio)


def test_a_trick_that_adds_nothing_on_top_of_the_best_is_not_added():
    """b is faster alone, but not on top of a (its gain overlaps a's): best is a alone."""
    a = _knob("a", "PIT985", 0.5, "channels_last")
    b = _knob("b", "PIT986", 0.8, "cudnn_benchmark")
    r, _ = _search([a, b], interactions={frozenset({"a", "b"}): 0.05}, repeats=3, max_pairs=4)
    assert r.trial("b").status == "kept"
    assert r.best is not None and r.best.name == "a"
    assert [s.status for s in r.combination] == ["added", "no_gain"]


def test_steps_per_s_follows_the_speedup_and_compile_pays_off_only_when_kept():
    slow_compile = _knob("slowc", "PIT987", 1.3, "channels_last", expensive=True, expensive_warmup=5.0)
    fast_compile = _knob("fastc", "PIT988", 0.5, "cudnn_benchmark", expensive=True, expensive_warmup=5.0)
    r, _ = _search([slow_compile, fast_compile], repeats=3, max_pairs=4)
    s, f = r.trial("slowc"), r.trial("fastc")
    assert s.status == "slower" and s.compile is not None and s.compile.break_even_steps is None
    assert f.status == "kept" and f.compile.break_even_steps is not None
    base = r.baseline.measured_steps_per_s
    for t in (s, f):
        assert t.steps_per_s == pytest.approx(base * t.speed.ratio)  # the columns never disagree
    import io

    from pitstop.report.tune_terminal import render_text

    buf = io.StringIO()
    render_text(r, file=buf, width=250)
    text = buf.getvalue()
    assert text.count("pays off after") == 1 and "KEPT" in text and "best: fastc" in text
