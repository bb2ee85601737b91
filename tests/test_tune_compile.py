"""The compile knob explains its verdict with what dynamo reported in the trial's runs
(issue 22): graph breaks with their lines, recompiles with the failing guard, and no compile
kept when a function hit the recompile limit during the trial."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from pitstop.doctor.analysis.compile_records import CompileRecord, GraphBreak, LimitHit, Recompile
from pitstop.tips.pit601_compile import CompileKnob, compile_facts
from pitstop.tune.explanation import explain_trial
from pitstop.tune.knob import Setting
from pitstop.tune.result import Run, Trial

SCRIPTS = FIXTURES / "compile"
BREAK = GraphBreak(reason="Unsupported Tensor.item() call", where="/u/model.py:45", source="if h.max().item() > 1:  # x")
SIZES = Recompile(function="forward", where="/u/model.py:20", guard="tensor 'ids' size mismatch at index 1",
                  example="tensor 'ids' size mismatch at index 1. expected 8, actual 9", count=6)
HIT = LimitHit(function="forward", where="/u/model.py:20", limit=8)


def _trial(status: str, *records: CompileRecord) -> Trial:
    knob = CompileKnob()
    t = Trial(name="torch.compile", settings=(Setting(knob.tip, knob.name, "default", "torch.compile"),),
              runs=[Run(status="ok", compile=r) for r in records], status=status, reason="interval below 1/1.05")
    explain_trial(t, lambda s: knob)
    return t


def test_the_facts_name_the_break_line_and_the_guard():
    text, veto = compile_facts([CompileRecord(compiled=True, breaks=[BREAK], recompiles=[SIZES])])
    assert text == "1 graph break (model.py:45 `if h.max().item() > 1:`), recompiled 6 times (tensor 'ids' size mismatch at index 1)"
    assert veto is None


def test_a_slower_trial_says_why_and_a_clean_one_says_it_is_the_step_itself():
    t = _trial("slower", CompileRecord(compiled=True, breaks=[BREAK]))
    assert t.status == "slower" and "model.py:45" in t.explanation and t.to_dict()["explanation"] == t.explanation
    clean = _trial("no_gain", CompileRecord(compiled=True))
    assert "no recompiles" in clean.explanation


def test_compile_is_never_kept_when_the_trial_hit_the_recompile_limit():
    t = _trial("kept", CompileRecord(compiled=True, recompiles=[SIZES], limit_hits=[HIT]))
    assert t.status == "rejected" and "recompile_limit" in t.reason and "eager" in t.explanation
    assert _trial("kept", CompileRecord(compiled=True, recompiles=[SIZES])).status == "kept"


def test_no_records_no_explanation():
    assert _trial("slower").explanation is None


# -- a short real tune run (--only PIT601, few steps): inductor compiles each run -------------------
# In this process (pitstop.tune.api.tune_script, what ``pitstop tune SCRIPT`` calls; the CLI's own
# arguments and JSON output are tested on the CNN search in test_tune_script.py): a CLI process
# would import torch and pitstop once more per search (~3 s CPU here) only to start the same
# warm worker. The runs fork from the test process's warm worker (``tests/doctor_warm.py``), shared
# by the three searches, as ``tune_script(worker=...)`` offers: a worker of their own would import
# torch and torch._dynamo again for each (~3 CPU-s). The report is read back as the CLI prints it
# (``--format json``: render_json).
def _search(warm_doctor, script: str, code: str, backend: str, steps: int = 4, warmup: int = 2) -> dict:
    from pitstop.report.tune_terminal import render_json
    from pitstop.tune.api import tune_script

    r = tune_script(str(SCRIPTS / script), args=("--backend", backend), only=[code], steps=steps, warmup=warmup, repeats=2,
                    max_pairs=2, worker=warm_doctor.runner)
    (t,) = [t for t in json.loads(render_json(r))["trials"] if t["knobs"][0]["code"] == code]
    return t


def _tune(warm_doctor, script: str) -> dict:
    return _search(warm_doctor, script, "PIT601", "none")


@pytest.mark.slow
def test_tune_names_the_item_branch_in_the_compile_verdict(warm_doctor):
    t = _tune(warm_doctor, "item_branch.py")
    assert t["status"] in ("kept", "slower", "no_gain")  # never assume compile is faster
    assert t["explanation"].startswith("1 graph break (item_branch.py:")
    assert "`if h.abs().max().item() > 10:`" in t["explanation"]


@pytest.mark.slow
def test_tune_names_the_varying_dimension_in_the_compile_verdict(warm_doctor):
    t = _tune(warm_doctor, "new_length.py")
    assert "graph break" not in t["explanation"]
    assert "tensor 'ids' size mismatch at index 1" in t["explanation"]


def test_extra_modes_only_where_they_can_pay_and_each_is_a_recipe():
    from pitstop import Recipe
    from pitstop.tune.knob import Context

    knob = CompileKnob()
    assert knob.values(Context(device="cpu")) == ["default"]
    cuda = knob.values(Context(device="cuda"))
    assert cuda[0] == "default" and {"reduce-overhead", "max-autotune-no-cudagraphs"} <= set(cuda)
    for v in cuda:
        Recipe(**knob.recipe_fields(v, Context(device="cuda")))


def test_the_dynamic_knob_applies_only_to_static_compiles_that_recompiled():
    from pitstop.tips.pit609_recompiles import DynamicShapesKnob
    from pitstop.tune.knob import Context

    knob = DynamicShapesKnob()
    assert knob.applies(Context(compiled=True, static_shapes=True, recompiles=4))
    assert knob.applies(Context(compiled=True, static_shapes=True, recompiles=1, recompile_limit_hit=True))
    assert "does not compile" in knob.applies(Context(compiled=False)).reason
    assert "dynamic=False" in knob.applies(Context(compiled=True, static_shapes=False, recompiles=9)).reason
    assert not knob.applies(Context(compiled=True, static_shapes=True, recompiles=1))


@pytest.mark.slow
def test_tune_tries_dynamic_shapes_on_a_static_compile_that_recompiles(warm_doctor):
    # three steps a run (lengths 8, 9, 10) are enough for the one recompile asserted below; every
    # baseline run recompiles at each step (dynamic=False), so fewer steps are fewer compiles
    # (~28 -> ~17 s CPU here); the verdict's clock and status are not what this test asserts
    t = _search(warm_doctor, "new_length.py", "PIT609", "aot_eager", steps=2, warmup=1)
    assert t["status"] != "not_applicable", t["reason"]
    # with dynamic=None the length becomes symbolic after one recompile: no limit hit, no veto
    assert t["explanation"] == "recompiled 1 time (tensor 'ids' size mismatch at index 1)"
