"""pitstop tune in script mode: the user's unmodified script in child processes (the doctor's runner)."""

from __future__ import annotations

import json
import sys

import pytest

from pitstop.engine.recipe import Recipe

from conftest import FIXTURES

pytestmark = pytest.mark.slow
pytest.importorskip("pitstop.doctor.run.runner", reason="script mode runs on pitstop doctor's child-process runner")

TUNE = FIXTURES / "tune"
sys.path.insert(0, str(TUNE))
import planted_knobs as planted  # noqa: E402

SPEEDUP = {"type": ["object", "null"], "required": ["ratio", "low", "high", "confidence", "rounds_won", "rounds"]}
KNOB = {"type": "object", "required": ["code", "knob", "value", "label"],
        "properties": {"code": {"type": "string", "pattern": "^PIT[0-9]{3}$"}}}
SCHEMA = {
    "type": "object",
    "required": ["schema", "mode", "target", "device", "settings", "baseline", "trials", "combination", "best",
                 "budget", "notes"],
    "properties": {
        "schema": {"const": "pitstop.tune/1"},
        "baseline": {"type": "object", "required": ["steps_per_s", "step_time", "noise", "runs", "loss"],
                     "properties": {"runs": {"type": "integer", "minimum": 2}}},
        "trials": {"type": "array", "items": {
            "type": "object", "required": ["name", "knobs", "speedup", "status", "reason", "loss_check", "recipe"],
            "properties": {"knobs": {"type": "array", "items": KNOB, "minItems": 1}, "speedup": SPEEDUP,
                           "status": {"enum": ["kept", "no_gain", "slower", "rejected", "failed", "not_applicable",
                                               "skipped"]},
                           "reason": {"type": "string", "minLength": 3}}}},
        "best": {"type": "object", "required": ["knobs", "recipe", "speedup", "snippet"],
                 "properties": {"knobs": {"type": "array", "items": KNOB}, "recipe": {"type": "object"}}},
    },
}

# One intra-op thread in every run (``--threads 1``, baseline included): on the shared 2-core test
# machine other processes keep the cores busy, and two OpenMP threads then spend most of a step
# waiting for each other (measured here: every configuration of the CNN ~550 ms/step and bf16
# *slower*, 0.88x, with 2 threads under load; ~130 ms/step and bf16 ~1.9x with one thread).
# Five measured steps and at most three pairs per decision (was 10 and 4: the search cost ~60 s of
# CPU of the suite's ~1200 on this 2-core AMD EPYC; now 29-34 s, beside a CPU hog). Every assertion
# below holds for any verdict the intervals reach (kept / no gain / slower, each checked against its
# interval), so fewer steps and pairs widen the intervals without making an outcome wrong.
CNN_ARGS = ("--only", "PIT301,PIT104,PIT101", "--steps", "5", "--warmup", "2", "--repeats", "2", "--max-pairs", "3",
            "--threads", "1")
CNN_SCRIPT_ARGS = ("--", "--batch-size", "32", "--work", "1", "--eval-every", "1000")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """One search on the bundled naive CNN (the default script), through the CLI."""
    from conftest import run_cli

    recipe = tmp_path_factory.mktemp("tune") / "recipe.toml"
    out = run_cli("tune", *CNN_ARGS, "--format", "json", "--save-recipe", str(recipe), *CNN_SCRIPT_ARGS, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), recipe


def _trials(d, code):
    return [t for t in d["trials"] if len(t["knobs"]) == 1 and t["knobs"][0]["code"] == code]


def _bar(d):
    return 1 + d["settings"]["margin"]  # paired intervals: the noise is inside them, no second bar


def test_cnn_bf16_autocast_is_equivalent_and_judged_by_its_interval(cnn):
    """bf16 is the largest gain on this CNN (measured 1.3-2.2x on a quiet machine: see the
    README) but the verdict is timing, and timing on a shared CI machine is not a test: assert
    what must hold whatever the load. The keep/slower decisions themselves are tested with
    planted, load-independent costs below."""
    d, _ = cnn
    (bf16,) = _trials(d, "PIT301")
    if bf16["status"] == "not_applicable":  # an operator of this model has no bf16 kernel on this CPU
        assert "is not available for this model on this device" in bf16["reason"], bf16
        return
    assert bf16["loss_check"]["status"] == "ok", bf16["loss_check"]  # bf16 trains the same
    assert bf16["status"] in ("kept", "no_gain", "slower"), bf16
    if bf16["status"] == "kept":
        assert bf16["speedup"]["low"] > _bar(d)
    else:
        assert bf16["speedup"]["low"] <= _bar(d) or not bf16["speedup"]["decided"]


def test_cnn_channels_last_is_kept_or_an_honest_no_gain(cnn):
    """channels_last's gain here is smaller (measured 1.1-1.35x on this CNN step) and can drown
    in the noise of a shared machine; it must never be rejected, fail, or be kept without
    beating the bar."""
    d, _ = cnn
    (cl,) = _trials(d, "PIT104")
    assert cl["status"] in ("kept", "no_gain"), cl
    assert cl["loss_check"]["status"] == "ok"
    if cl["status"] == "kept":
        assert cl["speedup"]["low"] > _bar(d)
    else:
        assert cl["speedup"]["low"] <= _bar(d) or not cl["speedup"]["decided"]


def test_cnn_keeps_workers_only_when_they_beat_the_noise(cnn):
    d, _ = cnn
    from pitstop.tune.context import usable_cores

    workers = _trials(d, "PIT101")
    # training on the CPU: up to half the cores (the step's compute uses all of them)
    values = [t["knobs"][0]["value"] for t in workers]
    assert values and all(1 <= v <= max(1, usable_cores() // 2) for v in values)
    for t in workers:
        if t["status"] == "not_applicable":  # the survey's data share cannot reach the bar (Amdahl)
            assert "not measured" in t["reason"] and "of the step" in t["reason"]
            continue
        assert t["loss_check"]["status"] == "ok"
        if t["status"] == "kept":
            assert t["speedup"]["low"] > _bar(d) and t["speedup"]["rounds"] >= 2
        else:
            assert t["status"] in ("no_gain", "slower") and t["speedup"]["low"] <= _bar(d) or not t["speedup"]["decided"]


def test_cnn_reports_a_combination_snippet_and_recipe(cnn):
    d, recipe_path = cnn
    best = d["best"]
    kept = {t["knobs"][0]["code"] for t in d["trials"] if t["status"] == "kept"}
    assert {k["code"] for k in best["knobs"]} <= kept | {t["knobs"][0]["code"] for t in d["trials"]
                                                         if t["status"] == "no_gain"}
    if best["knobs"]:
        # the claim is the fresh confirmation pairs' (after the choice); a CPU-time win on a busy
        # machine is capped at wall time's estimate, whose interval may reach below the bar
        sp = best["speedup"]
        capped = sp["measure"] == "wall" and "capped" in sp["measure_why"]
        assert (sp["ratio"] >= _bar(d)) if capped else (sp["low"] > _bar(d))
        assert d["combination"][0]["status"] == "added" and d["combination"][-1]["status"] in ("confirmed", "unconfirmed")
    if "PIT301" in {k["code"] for k in best["knobs"]}:
        assert best["recipe"]["precision"] == "bf16-mixed" and "torch.autocast" in best["snippet"]
    loaded = Recipe.load(recipe_path)
    assert loaded == Recipe.from_dict(best["recipe"])  # --save-recipe round-trips
    n_a = {t["knobs"][0]["code"] for t in d["trials"] if t["status"] == "not_applicable"}
    assert n_a == set()  # --only: nothing else was looked at


def test_cnn_time_says_where_each_configurations_set_up_went(cnn):
    """The child's marks (script start, imports, first training forward, first step) split each
    configuration's set-up; the plan is made before measuring; --steps fixes the step count."""
    d, _ = cnn
    times = {t["trial"]: t for t in d["time"]["trials"]}
    base = times["baseline"]
    assert base["runs"] == d["baseline"]["runs"] and sum(t["runs"] for t in times.values()) == d["time"]["runs"]
    sp = base["split"]
    assert sp["start"] > 0 and sp["build"] > 0 and sp["imports"] >= 0 and sp["first_step"] is not None
    assert sp["start"] + sp["imports"] + sp["build"] + sp["first_step"] <= base["setup"] * 1.05 + 0.05
    plan = d["budget"]["plan"]
    assert plan["steps"] == 5 and plan["steps_why"] is None and plan["run_s"] > 0
    assert {t["name"] for t in d["trials"] if t["status"] != "not_applicable"} <= {i["trick"] for i in plan["items"]}


def test_cnn_json_schema(cnn):
    jsonschema = pytest.importorskip("jsonschema")
    d, _ = cnn
    jsonschema.validate(d, SCHEMA)
    assert d["mode"] == "script" and d["target"] == "-m pitstop.examples.cnn"
    assert d["context"]["conv2d"] == 3 and d["context"]["input_dims"] == 4


def test_saved_recipe_trains_with_pitstop_fit(cnn):
    import torch
    from torch.nn import functional as F
    from torch.utils.data import DataLoader

    import pitstop
    from pitstop.examples.data import SyntheticImages
    from pitstop.examples.models import make_cnn

    _, recipe_path = cnn
    recipe = Recipe.load(recipe_path).replace(num_workers=None, persistent_workers=None)
    model = make_cnn(naive=False, width=8)
    loader = DataLoader(SyntheticImages(n=16, work=0), batch_size=8)
    out = pitstop.fit(model, torch.optim.SGD(model.parameters(), lr=0.01),
                      lambda m, b: F.cross_entropy(m(b[0]), b[1]), loader, recipe=recipe, max_steps=2)
    assert out.steps == 2


@pytest.fixture(scope="module")
def planted_result(warm_doctor):
    from pitstop.tune.api import tune_script

    knobs = [planted.PerturbLossKnob(), planted.CrashKnob(), planted.HangKnob(), planted.OOMKnob(), planted.NoopKnob()]
    return tune_script(str(TUNE / "tiny_train.py"), steps=5, warmup=2, repeats=2, max_pairs=3, timeout=15, threads=1,
                       knobs=knobs, worker=warm_doctor.runner)


@pytest.fixture(scope="module")
def paced_result(warm_doctor):
    """tiny_train.py sleeping 40 ms per step: removing the sleep is a 2x+ speed-up and a 30 ms
    sleep per forward a slow-down, whatever else runs on the machine."""
    from pitstop.tune.api import tune_script

    knobs = [planted.SkipPaceKnob(), planted.SlowKnob()]
    return tune_script(str(TUNE / "tiny_train.py"), args=("--pace", "40"), steps=6, warmup=2, repeats=2, timeout=60,
                       threads=1, knobs=knobs, worker=warm_doctor.runner)


def test_a_real_speedup_is_kept_a_slowdown_called_slower_and_the_best_is_the_winner(paced_result):
    r = paced_result
    fast, slow = r.trial("skip-pace"), r.trial("slow")
    bar = 1 + r.settings.options.margin
    assert fast.status == "kept", fast.reason
    assert fast.speedup["low"] > bar and fast.speedup["ratio"] > 1.5
    assert slow.status == "slower", slow.reason
    assert slow.speedup["high"] < 1
    assert r.best is not None and "skip-pace" in {s.knob for s in r.best.settings}
    assert "slow" not in {s.knob for s in r.best.settings}


def test_script_mode_rejects_the_planted_loss_perturbation(planted_result):
    t = planted_result.trial("perturb-loss")
    assert t.status == "rejected" and "not equivalent" in t.reason
    assert t.loss_check.deviation > 5 * t.loss_check.tolerance
    assert planted_result.trial("noop").status in ("no_gain", "kept", "slower")  # the control is equivalent


def test_crash_hang_and_oom_are_reported_failed_and_the_search_goes_on(planted_result):
    crash, hang, oom = (planted_result.trial(n) for n in ("crash", "hang", "oom"))
    assert crash.status == "failed" and "crashed" in crash.reason and "signal 9" in crash.reason
    assert hang.status == "failed" and "timed out" in hang.reason
    assert oom.status == "failed" and "out of memory" in oom.reason
    assert all(len(t.runs) == 1 for t in (crash, hang, oom))  # failed trials are not repeated
    assert len(planted_result.trial("noop").runs) >= 2  # ... and the others still ran: no verdict from one pair
    assert len(planted_result.baseline.runs) >= 2  # every noop run is next to a baseline run


def test_cli_bad_input_is_exit_2_and_a_broken_script_exit_3(cli, tmp_path):
    missing = cli("tune", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "no such script" in missing.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n    pass\n")
    syntax = cli("tune", str(bad))
    assert syntax.returncode == 2 and "bad.py:1" in syntax.stderr
    only = cli("tune", "--only", "PIT999")
    assert only.returncode == 2 and "PIT999" in only.stderr
    broken = cli("tune", str(TUNE / "tiny_train.py"), "--threads", "1", "--", "--fail")
    assert broken.returncode == 3 and "broken on purpose" in broken.stderr


def test_a_knob_that_cannot_change_the_model_is_a_setup_error_reported_by_the_child(warm_doctor):
    """The child reports a knob's failed patch as a typed status (``setup_error``, the knob's
    message), not as the script's error for the tuner to find in the traceback text (a run forked
    from the warm worker, as ``pitstop tune`` runs it)."""
    from pitstop.doctor.run.spec import RunSpec, Setup
    from pitstop.tune.child import TARGET, setup_kwargs
    from pitstop.tune.knob import Context
    from pitstop.tune.script import run_from_result

    spec = RunSpec(script=str(TUNE / "tiny_train.py"), steps=2, warmup=0, mode="light", probes=False,
                   stdout="devnull", timeout=120,
                   setups=(Setup(TARGET, setup_kwargs(planted.BrokenPatchKnob(), None, Context())),))
    result, _ = warm_doctor.run(spec)
    assert result.status == "setup_error", (result.status, result.message)
    assert result.message.startswith("could not change") and "planted: no such layer" in result.message
    run = run_from_result(result, 2)
    assert run.status == "setup_error" and run.message == result.message
