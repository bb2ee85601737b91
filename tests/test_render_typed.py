"""Renderers take the typed result and decide nothing: the tune report and the doctor's ranks
table never go through the JSON form (``to_dict``), and they show what the JSON holds."""

from __future__ import annotations

import io

import pytest

from pitstop.doctor.analysis.diagnosis import Diagnosis
from pitstop.doctor.analysis.dist_records import JobRecord, RankDist
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord
from pitstop.engine.recipe import Recipe
from pitstop.paired import Decision, Measure
from pitstop.ranks import RankView, StepStats
from pitstop.tune.equivalence import LossCheck
from pitstop.tune.knob import Context, Setting
from pitstop.tune.options import TuneOptions
from pitstop.tune.result import Run, Trial, TuneResult
from pitstop.tune.search_info import TuneSettings


def _no_json(monkeypatch, cls):
    def boom(self):
        raise AssertionError(f"a renderer called {cls.__name__}.to_dict")

    monkeypatch.setattr(cls, "to_dict", boom)


def _tune_result() -> TuneResult:
    run = Run(status="ok", step_times=[0.1, 0.1], losses=[1.0, 0.9], batch_size=16)
    speed = Decision("faster", 1.3, 1.2, 1.4, 0.9, pairs=3, won=3, measure=Measure("wall", "quiet"))
    best = Trial(name="bf16 autocast", settings=(Setting("PIT301", "autocast", "bf16", "bf16 autocast"),),
                 runs=[run], status="kept", recipe_fields={"precision": "bf16-mixed"}, speed=speed,
                 loss_check=LossCheck("ok", 0.0123, 0.05, "fine"), base_steps_per_s=10.0)
    bad = Trial(name="fp16 autocast", settings=(Setting("PIT302", "autocast", "fp16", "fp16 autocast"),),
                runs=[run], status="rejected", reason="the loss diverged", speed=speed,
                loss_check=LossCheck("diverged", 0.314, 0.05, "bad"), base_steps_per_s=10.0)
    return TuneResult(mode="script", target="train.py", device="cpu",
                      settings=TuneSettings(TuneOptions(steps=3, warmup=1, repeats=2)),
                      context=Context(framework="transformers"), baseline=Trial(name="baseline", runs=[run]),
                      trials=[best, bad], best=best, best_recipe=Recipe(precision="bf16-mixed").to_dict(),
                      snippet="with torch.autocast(...):\n", noise=0.01)


def test_the_tune_report_reads_the_typed_result_and_shows_what_the_json_holds(monkeypatch):
    from pitstop.report.tune_terminal import render_text

    result = _tune_result()
    d = result.to_dict()
    _no_json(monkeypatch, TuneResult)
    _no_json(monkeypatch, Trial)
    _no_json(monkeypatch, LossCheck)
    _no_json(monkeypatch, Decision)
    buf = io.StringIO()
    render_text(result, file=buf, width=250)
    text = buf.getvalue()
    base, best = d["baseline"], d["best"]
    assert f"baseline: {base['steps_per_s']:.2f} steps/s, {base['samples_per_s']:.1f} samples/s (1 runs" in text
    assert f"({best['steps_per_s']:.2f} steps/s), loss ok (1.23%)" in text
    assert "DIVERGED (31.4% > 5.0%)" in text and "1.30x [1.20, 1.40]" in text
    assert best["framework"]["snippet"] in text and "set it in your TrainingArguments" in text
    assert "pitstop.Recipe(precision='bf16-mixed')" in text and best["recipe_changed"] == {"precision": "bf16-mixed"}


def _torchrun_diagnosis() -> Diagnosis:
    steps = [StepRecord(index=i, kind="observed", wall=0.1, phases={"forward": 0.04}) for i in range(3)]
    spec = RunSpec(script="train.py", steps=3, warmup=1, nproc_per_node=2)
    result = RunResult(spec=spec, status="error", steps=steps, message="rank 1: the script raised ValueError",
                       traceback="Traceback (most recent call last):\nValueError: planted\n")
    dist = tuple(RankDist(rank=r, world_size=2, initialized=True, backend="gloo", allreduce_bytes=(4096, 4096),
                          reductions=(1, 1), reduction_source="pitstop comm hook",
                          ddp_logging={"bucket_sizes": [4096], "avg_backward_comm_time": 2_000_000} if r == 0 else {})
                 for r in (0, 1))
    obs = Observations(distributed=JobRecord(world_size=2, ranks=dist))
    views = [RankView(rank=r, world_size=2, step_time=StepStats(0.1 + 0.05 * r, 0.12 + 0.05 * r, 3),
                      breakdown={"forward": 0.04, "collective": 0.01 * (2 - r)}, samples_per_s=160.0 - 40 * r)
             for r in (0, 1)]
    return Diagnosis(result=result, observations=obs, world_size=2, rank_views=views, stragglers=[1],
                     rank_status=[{"rank": 0, "status": "ok", "message": ""},
                                  {"rank": 1, "status": "error", "message": "ValueError"}])


def test_the_ranks_table_reads_the_typed_diagnosis(monkeypatch):
    from pitstop.report.doctor_html import doctor_html
    from pitstop.report.doctor_ranks import rank_rows
    from pitstop.report.doctor_terminal import render

    diag = _torchrun_diagnosis()
    d = diag.to_dict()
    assert [r["status"] for r in d["ranks"]] == ["ok", "error"] and d["ranks"][1]["allreduce_bytes_per_step"] == 4096
    _no_json(monkeypatch, Diagnosis)
    headers, rows = rank_rows(diag)
    assert headers == ["", "rank 0", "rank 1 (straggler)"]
    cells = {row[0]: row[1:] for row in rows}
    assert cells["status"] == ["ok", "error"] and cells["samples/s"] == ["160", "120"]
    assert cells["all-reduce/step"][0].endswith("in 1 round(s)") and "collective (mean)" in cells
    buf = io.StringIO()
    render(diag, file=buf)
    text = " ".join(buf.getvalue().split())  # the console wraps long lines
    assert "2 ranks side by side" in text and "straggler: the other ranks steadily wait" in text
    assert "step-time spread: rank 1" in text and "DDP's own logging data" in text
    assert f"Traceback of the rank that failed first ({d['message']})" in text and "ValueError: planted" in text
    page = doctor_html(diag)
    assert "2 ranks side by side" in page and "rank 1 (straggler)" in page


@pytest.mark.parametrize("name", ["tune_terminal", "doctor_ranks", "doctor_terminal", "doctor_html"])
def test_renderers_read_no_json_keys(name):
    """No ``d["key"]`` reads of a result's JSON form (``render_json`` alone dumps it)."""
    import inspect
    import re

    import pitstop.report as report

    src = inspect.getsource(getattr(__import__(f"{report.__name__}.{name}"), "report").__dict__[name])
    assert not re.search(r"\.to_dict\(\)\[|\bd\[\"|\bd\.get\(", src)
    assert src.count(".to_dict()") == (1 if name == "tune_terminal" else 0)
