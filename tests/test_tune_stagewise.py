"""The stagewise search on a fake runner whose step time is ``max(data, compute)``: a trick
whose gain only shows once another moved the bottleneck is kept at the second stage, not at
the first; the path is the result (stages, JSON, report, recipe, snippet)."""

from __future__ import annotations

import io
import json
import re

import pytest

from pitstop.jsoncodec import dumps
from pitstop.tune.knob import Context, Setting
from pitstop.tune.options import TuneOptions
from pitstop.tune.protocol import search
from pitstop.tune.stages import evidence_order, retry_reason, shares_after
from tune_fakes import BottleneckBackend, fake_knob


SHARES = (("data", 0.6), ("forward", 0.15), ("backward", 0.25))
_knob = fake_knob


def _knobs():
    workers = _knob("workers", "PIT961", data=0.25, field="cudnn_benchmark", phases=("data",))
    halve = _knob("halve", "PIT962", compute=0.5, field="channels_last", phases=("forward", "backward"))
    return workers, halve


def _run(knobs, **opts):
    backend = BottleneckBackend(knobs)
    return search(backend, knobs, TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5, **opts)), backend


def test_the_second_trick_is_kept_at_the_second_stage_and_not_at_the_first():
    workers, halve = _knobs()
    r, backend = _run([workers, halve])
    assert r.trial("workers").status == "kept" and r.trial("halve").status == "no_gain"  # alone: the data wait hides it
    assert [s.trick for s in r.stages] == ["workers", "halve"]
    first, second = r.stages
    assert first.speed.ratio == pytest.approx(0.10 / 0.06, rel=0.02)
    assert second.speed.ratio == pytest.approx(0.06 / 0.03, rel=0.02)  # vs stage 1, not vs the baseline
    assert second.cumulative == pytest.approx(0.10 / 0.03, rel=0.03) and second.clock == "wall"
    assert all(s.in_recipe for s in r.stages)
    assert {s.knob for s in r.best.settings} == {"workers", "halve"}
    assert r.best.speed.ratio == pytest.approx(0.10 / 0.03, rel=0.03)  # confirmed vs the untouched baseline
    assert r.combination[-1].status == "confirmed"
    assert ("halve", "workers") in backend.calls or ("workers", "halve") in backend.calls


def test_the_path_is_in_the_json_the_report_the_recipe_and_the_snippet():
    from pitstop.report.tune_terminal import render_text

    r, _ = _run(list(_knobs()))
    d = json.loads(dumps(r.to_dict()))
    assert [s["trick"] for s in d["stages"]] == ["workers", "halve"]
    assert d["stages"][1]["speedup_vs_previous"]["ratio"] == pytest.approx(2.0, rel=0.02)
    assert d["stages"][1]["cumulative"] == pytest.approx(r.stages[1].cumulative)
    assert d["best"]["recipe"]["channels_last"] is True and d["best"]["recipe"]["cudnn_benchmark"] is True
    assert "# workers on" in r.snippet and "# halve on" in r.snippet
    buf = io.StringIO()
    render_text(r, file=buf, width=250)
    text = buf.getvalue()
    assert "stage 1: + workers: 1.6" in text and "over the baseline (wall time)" in text
    assert re.search(r"stage 2: \+ halve: (1\.9\d|2\.0\d)x \[[\d.]+, [\d.]+\] over stage 1 \(wall time\), 3\.3\dx cumulative", text)
    assert "confirmed: workers + halve vs the untouched baseline" in text


def test_a_trick_on_phases_the_path_already_shortened_is_skipped_with_the_reason():
    workers, halve = _knobs()
    cache = _knob("cache", "PIT963", data=1.03, field="pin_memory", phases=("data",))  # no gain alone
    r, backend = _run([workers, halve, cache])
    assert r.trial("cache").status in ("no_gain", "slower") and r.trial("cache").speed.ratio < 1
    assert not any(set(c) == {"workers", "cache"} for c in backend.calls)  # never measured on top of workers
    skip = [s for s in r.combination if s.added == "cache"]
    assert skip and skip[0].status == "skipped" and "already shortened" in skip[0].reason
    assert [s.trick for s in r.stages] == ["workers", "halve"]


def test_without_a_gain_on_top_the_path_stops_after_its_first_stage():
    workers = _knob("workers", "PIT961", data=0.25, field="cudnn_benchmark", phases=("data",))
    useless = _knob("useless", "PIT964", compute=1.0, field="channels_last", phases=("forward", "backward"))
    r, _ = _run([workers, useless])
    assert [s.trick for s in r.stages] == ["workers"]
    assert [(s.added, s.status) for s in r.combination][:2] == [("workers", "added"), ("useless", "no_gain")]
    assert [s.knob for s in r.best.settings] == ["workers"]


def test_a_budget_that_runs_out_stops_the_path_and_says_so():
    workers, halve = _knobs()
    backend = BottleneckBackend([workers, halve])
    r = search(backend, [workers, halve], TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5, budget=0.05))
    assert r.budget.exhausted and any("budget" in n for n in r.notes)


def test_the_evidence_orders_candidates_and_amdahl_skips_a_phase_the_path_left_small():
    # a 1.67x path on the data phase (60% of the step) took 0.4 of the baseline step from it:
    # data keeps 0.2 of the 0.6 left, forward + backward the rest
    after = shares_after(Context(phase_shares=SHARES), {"data"}, 1 / 0.6)
    assert after["data"] == pytest.approx(0.2 / 0.6) and after["backward"] == pytest.approx(0.25 / 0.6)
    cands = ["opt", "fwd", "any"]
    ph = {"opt": ("optimizer",), "fwd": ("forward", "backward"), "any": ()}
    assert evidence_order(cands, ph.get, after) == ["any", "fwd", "opt"]
    path = (Setting("PIT961", "workers", 2, "num_workers=2"),)
    phases = lambda s: ("data",)  # noqa: E731
    assert retry_reason(("forward",), path, phases, after, bar=1.05, safety=2.0) is None
    small = {"data": 0.0, "forward": 0.99, "optimizer": 0.01}
    why = retry_reason(("optimizer",), path, phases, small, bar=1.05, safety=2.0)
    assert why is not None and "optimizer about 1.0% of the step" in why
    assert "already shortened" in retry_reason(("data",), path, phases, small, bar=1.05, safety=2.0)
    assert shares_after(Context(phase_shares=SHARES), None, 2.0) is None  # a path trick that may change anything


def test_a_torchrun_trial_whose_losses_differ_on_one_rank_only_is_rejected():
    """Every rank's trajectory is checked (a job run's ``rank_losses``): rank 0 identical, rank 1
    off by 20% under the trick: rejected, the rank named."""
    workers, halve = _knobs()

    class Ranks(BottleneckBackend):
        def run(self, settings, knobs, **kw):
            run = super().run(settings, knobs, **kw)
            off = 1.2 if any(s.knob == "workers" for s in settings) else 1.0
            run.rank_losses = [list(run.losses), [v * off for v in run.losses]]
            return run

    r = search(Ranks([workers, halve]), [workers, halve], TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5))
    t = r.trial("workers")
    assert t.status == "rejected" and "rank 1 of 2" in t.reason


def test_a_path_the_budget_left_unconfirmed_is_not_reported_confirmed():
    from pitstop.report.tune_terminal import render_text
    from pitstop.tune.result import CombineStep

    r, _ = _run(list(_knobs()))
    r.combination[-1] = CombineStep(r.best.name, "unconfirmed", "the time budget ran out", r.best.speed)
    buf = io.StringIO()
    render_text(r, file=buf, width=250)
    text = buf.getvalue()
    assert "unconfirmed: workers + halve: the time budget ran out" in text and "  confirmed: workers" not in text


class StarvedSurvey(BottleneckBackend):
    """The survey of a starved loop (the H100 run of issue 28): forward + backward 2% of the
    step, so the compute trick is left unmeasured alone (the survey's bound)."""

    def context(self):
        return Context(mode="api", phase_shares=(("data", 0.98), ("forward", 0.01), ("backward", 0.01)))


def test_a_trick_the_survey_left_unmeasured_alone_is_measured_once_the_path_moves_the_bottleneck():
    workers, halve = _knobs()
    backend = StarvedSurvey([workers, halve])
    r = search(backend, [workers, halve], TuneOptions(steps=4, warmup=1, repeats=3, max_pairs=5))
    alone = r.trial("halve")
    assert alone.status == "not_applicable" and "not measured" in alone.reason  # the survey's bound, stage 1
    assert ("halve",) not in backend.calls
    assert [s.trick for s in r.stages] == ["workers", "halve"]  # measured on top of the workers, and kept
    assert r.stages[1].speed.ratio == pytest.approx(0.06 / 0.03, rel=0.02)
