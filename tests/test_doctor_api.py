"""The Python API (pitstop.doctor(step_fn)), the runner API tune builds on, and checks on plain data."""

from __future__ import annotations

import json
import ast
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import pitstop
from pitstop.doctor import Observations, RunResult, RunSpec, Setup, Thresholds, diagnose, run_script
from pitstop.doctor.analysis.check import Check
from pitstop.doctor.analysis.probe import Probe
from pitstop.doctor.analysis.records import Breakdown, StepTime
from pitstop.doctor.run.spec import StepRecord
from pitstop.catalog import implementations

from conftest import FIXTURES

TINY = str(FIXTURES / "doctor" / "tiny.py")


def _step_fn(sync: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    kept = []

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sync:
            kept.append(loss)  # PIT202
            loss.item()  # PIT201
    return step, model


def test_doctor_api_diagnoses_a_step_function():
    step, model = _step_fn(sync=True)
    before = [p.detach().clone() for p in model.parameters()]
    report = pitstop.doctor(step, steps=4, warmup=1, probes=False)
    assert report.outcome == "diagnosed" and report.exit_code == 0 and report.errors == []
    assert len(report.result.observed) == 4
    # the last 2 observed steps each followed by a bare step (hooks off: the doctor's own overhead)
    # (4 observed steps: two in a row, then observed, bare, observed, bare)
    assert [s.kind for s in report.result.steps] == ["warmup", "observed", "observed"] + ["observed", "bare"] * 2 + ["profiled"]
    assert report.observations.overhead is not None and report.observations.overhead.pairs == 2
    losses = [s.loss for s in report.result.steps]
    assert all(isinstance(v, float) for v in losses) and losses[-1] < losses[0]  # it trained
    codes = {f.code for f in report.findings}
    assert {"PIT201", "PIT202"} <= codes
    sync = next(f for f in report.findings if f.code == "PIT201")
    line = next(i for i, text in enumerate(open(__file__), 1) if text.strip() == "loss.item()  # PIT201")
    assert any(w.endswith(f"test_doctor_api.py:{line}") for w in sync.where), (line, sync.where)
    assert report.observations.batch_size == 32
    assert not torch.equal(before[0], next(model.parameters()))  # the user's model really trained
    # the instrumentation is gone afterwards
    assert torch.autograd.backward.__module__ == "torch.autograd"
    assert torch.Tensor.item.__class__.__name__ != "function"


def test_doctor_api_clean_step_has_no_sync_or_leak_findings():
    step, _ = _step_fn(sync=False)
    report = pitstop.doctor(step, steps=3, warmup=1, probes=False)
    assert report.errors == []
    assert not {"PIT201", "PIT202"} & {f.code for f in report.findings}
    assert json.loads(json.dumps(report.to_dict(), default=str))["outcome"] == "diagnosed"


def test_doctor_api_step_function_that_never_steps():
    model = nn.Linear(4, 4)
    report = pitstop.doctor(lambda: model(torch.randn(2, 4)), steps=2, warmup=0, probes=False, max_calls=5)
    assert report.outcome == "nothing" and report.exit_code == 5
    assert "nothing to diagnose" in report.headline and "5 forward passes" in report.headline


def test_doctor_api_step_function_that_raises():
    def step():
        raise ValueError("bad batch")
    report = pitstop.doctor(step, steps=2, warmup=0, probes=False)
    assert report.outcome == "script_failed" and "ValueError: bad batch" in report.result.traceback


@pytest.mark.slow
def test_light_mode_seeding_and_setups_for_tune(warm_doctor):
    """One run in a fresh child (``run_script``), the others forked from the warm worker, as
    ``pitstop tune`` runs them (``tests/doctor_warm.py``): the fork inherits the worker's random
    state, so equal losses mean the child's seeding set it, in both kinds of process."""
    base = dict(script=TINY, steps=4, warmup=1, mode="light", stdout="devnull", args=("--steps", "20"))
    a, b = run_script(RunSpec(**base)), warm_doctor.run(RunSpec(**base))[0]
    for r in (a, b):
        assert r.status == "stopped" and r.observations is None
        assert [s.kind for s in r.steps] == ["warmup"] + ["observed"] * 4  # no profiled step in light mode
        assert set(r.steps[1].phases) <= {"backward", "optimizer"}
        assert r.steps_per_s > 0 and r.peak_memory > 0
    assert a.losses == b.losses and all(v is not None for v in a.losses)  # seeded the same way
    # a setup runs after the seeding and before the script: reseeding changes the data
    c = warm_doctor.run(RunSpec(**base, setups=(Setup("pitstop.helpers.seed:seed_everything", {"seed": 1}),)))[0]
    assert c.status == "stopped" and c.losses != a.losses
    # results round-trip through JSON
    again = RunResult.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again.losses == c.losses and again.spec == c.spec
    # a failing setup is reported, not raised
    d = warm_doctor.run(RunSpec(**base, setups=(Setup("pitstop.helpers.seed:seed_everything", {"seed": -1}),)))[0]
    assert d.status == "setup_error" and "seed must be an int" in d.traceback


def test_spec_validation():
    with pytest.raises(ValueError, match="exactly one"):
        RunSpec()
    with pytest.raises(ValueError, match="module:function"):
        Setup("no_colon")
    with pytest.raises(TypeError):
        Setup("a:b", {"x": object()})
    with pytest.raises(ValueError, match="mode"):
        RunSpec(script="x.py", mode="heavy")


def _result(**obs) -> RunResult:
    spec = RunSpec(script="x.py", steps=2, warmup=0)
    steps = [StepRecord(index=i, kind="observed", wall=0.1) for i in range(2)]
    base = {"step_time": {"median": 0.1, "mean": 0.1, "p90": 0.1, "min": 0.1, "max": 0.1},
            "breakdown": {"data": 0.0, "forward": 0.04, "backward": 0.05, "optimizer": 0.01, "eval": 0.0, "other": 0.0},
            "steps_observed": 2}
    return RunResult(spec=spec, status="stopped", steps=steps, observations=Observations.from_dict({**base, **obs}))


def test_cuda_only_checks_are_skipped_on_cpu_and_run_on_cuda():
    cpu = diagnose(_result(device="cpu"))
    assert {s.code for s in cpu.skipped} >= {"PIT102", "PIT103", "PIT304", "PIT602", "PIT604"}
    cuda = diagnose(_result(device="cuda", capability=[8, 0], device_name="NVIDIA A100",
                            kernels={"matmul": {"float32": 12}, "conv": {}},
                            settings={"float32_matmul_precision": "highest", "tf32_matmul": False}))
    assert "PIT304" not in {s.code for s in cuda.skipped}
    assert "PIT304" in {f.code for f in cuda.findings}


def _names_a_tip(source: str) -> list[str]:
    """Tip codes or tip modules named by code (strings, imports, names), docstrings aside."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docs]
    texts += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    texts += [a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    return [t for t in texts if re.search(r"PIT\d{3}|pit\d{3}_", t)]


def test_probes_are_a_registered_face_the_mechanism_never_names():
    assert _names_a_tip('x = {"bf16": "PIT301"}') and _names_a_tip("from pitstop.tips import pit301_mixed_precision")
    from pitstop.doctor.record.probing.run import probe_classes

    by_tip = {c.tip: c for c in probe_classes()}
    assert {"PIT104", "PIT301", "PIT501"} <= set(by_tip)
    assert all(issubclass(c, Probe) and c.name and c.face == "D" for c in by_tip.values())
    src = Path(pitstop.__file__).parent / "doctor"
    for mod in ("analysis/probe.py", "record/probing/run.py", "record/collect.py", "record/memory.py",
                "analysis/diagnosis.py"):
        assert not _names_a_tip((src / mod).read_text(encoding="utf-8")), mod
    # a probe decides from the plain observations whether it applies, before touching torch
    obs = Observations(steps_observed=1, step_time=StepTime(mean=1.0, median=1.0), breakdown=Breakdown(other=1.0))
    assert all(c().skip_reason(obs) for c in by_tip.values())


def test_probe_timing_pairs_rounds_in_abba_order():
    from pitstop.doctor.record.probing.run import time_variants

    calls: list[str] = []
    t = time_variants({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, "cpu",
                      budget_s=0.0, min_reps=4, warmup=2)
    assert calls == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b", "b", "a"]  # warm-up, then ABBA rounds
    assert len(t["a"]) == len(t["b"]) == 4 and all(x.wall >= 0 for x in t["a"] + t["b"])


def test_probe_timing_stops_once_every_candidate_decided():
    """The same paired/adaptive core as tune: a planted 3x CPU cost decides after min_reps
    rounds, long before the budget; a tie keeps measuring until the budget or max_reps."""
    import time

    from pitstop.doctor.record.probing.run import time_variants

    def spin(s):
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    t = time_variants({"slow": lambda: spin(0.006), "fast": lambda: spin(0.002)}, "cpu", budget_s=30.0,
                      min_reps=4, max_reps=40, warmup=1, baseline="slow")
    assert len(t["slow"]) < 40  # decided early
    tie = time_variants({"a": lambda: spin(0.001), "b": lambda: spin(0.001)}, "cpu", budget_s=0.0, min_reps=4,
                        max_reps=6, warmup=1, baseline="a")
    assert len(tie["a"]) >= 4


def test_probe_gate_uses_the_interval_lower_bound():
    """A probe whose median ratio clears the gate but whose interval does not is no finding."""
    def probe(low):
        return {"what": "fwd+bwd", "baseline": "fp32", "seconds": {"fp32": 0.2, "bfloat16": 0.1}, "runs": 10,
                "speedups": {"bfloat16": {"ratio": 2.0, "low": low, "high": 3.0}}, "candidate": "bfloat16",
                "speedup": 2.0, "interval": [low, 3.0], "confidence": 0.9, "compute_only": True, "dtype": "bfloat16"}
    models = [{"class": "Net", "params": 10, "param_dtype": "float32", "conv2d": 0}]
    br = {"data": 0.0, "forward": 0.04, "backward": 0.05, "optimizer": 0.01, "eval": 0.0, "other": 0.0}
    sure = diagnose(_result(models=models, breakdown=br, probes={"precision": probe(1.5)}))
    unsure = diagnose(_result(models=models, breakdown=br, probes={"precision": probe(1.05)}))
    assert sure.errors == [] and unsure.errors == []
    assert "PIT301" in {f.code for f in sure.findings}
    assert "PIT301" not in {f.code for f in unsure.findings}
    pit301 = next(f for f in sure.findings if f.code == "PIT301")
    assert "pitstop tune" in pit301.evidence and "1.50x-3.00x" in pit301.evidence
    # the estimate uses the lower bound: 90% compute share * (1 - 1/1.5)
    assert pit301.impact_share == pytest.approx(0.9 * (1 - 1 / 1.5), rel=1e-6)


def test_reports_render_probe_results_skips_and_errors():
    import io

    from pitstop.report.doctor_html import doctor_html
    from pitstop.report.doctor_terminal import render

    probes = {"optimizer": {"what": "SGD.step()", "baseline": "for-loop", "seconds": {"for-loop": 2e-3, "foreach": 1e-3},
                            "runs": 9, "speedups": {"foreach": {"ratio": 2.0, "low": 1.6, "high": 2.4}},
                            "candidate": "foreach", "speedup": 2.0, "interval": [1.6, 2.4], "confidence": 0.9,
                            "compute_only": True},
              "channels_last": {"skipped": "no Conv2d layers in the model"},
              "precision": {"error": "PIT301 PrecisionProbe: RuntimeError: broken"}}
    optimizers = [{"class": "SGD", "mode": "for-loop", "state_ratio": 1.0, "state_bytes": 10, "options": {}}]
    diag = diagnose(_result(probes=probes, optimizers=optimizers,
                            memory={"params": 10, "grads": 10, "optimizer_state": 10, "activations": 10, "peak": 40}))
    assert diag.errors == ["probe precision: PIT301 PrecisionProbe: RuntimeError: broken"]
    buf = io.StringIO()
    render(diag, file=buf)
    text = buf.getvalue()
    assert "foreach 2.00x (90% 1.60x-2.40x, 9 rounds) vs for-loop" in text
    assert "probe channels_last: skipped (no Conv2d layers in the model)" in text
    assert "RuntimeError: broken" in text
    page = doctor_html(diag)
    assert "foreach 2.00x (90% 1.60x-2.40x, 9 rounds) vs for-loop" in page and "RuntimeError: broken" in page


def test_thresholds_decide_the_data_wait_finding():
    loaders = [{"role": "train", "num_workers": 0, "where": "t.py:3"}]
    br = {"data": 0.006, "forward": 0.04, "backward": 0.044, "optimizer": 0.01, "eval": 0.0, "other": 0.0}
    r = _result(loaders=loaders, breakdown=br)
    assert "PIT101" in {f.code for f in diagnose(r).findings}  # 6% > 5%
    assert "PIT101" not in {f.code for f in diagnose(r, Thresholds(data_wait_share=0.10)).findings}


def test_data_wait_is_an_upper_bound_that_counts_the_cores():
    loaders = [{"role": "train", "num_workers": 0, "where": "t.py:3"}]
    br = {"data": 0.03, "forward": 0.03, "backward": 0.03, "optimizer": 0.01, "eval": 0.0, "other": 0.0}

    def pit101(cores, threads):
        d = diagnose(_result(loaders=loaders, breakdown=br, device="cpu",
                             settings={"cpu_cores": cores, "num_threads": threads}))
        assert d.errors == []
        return next(f for f in d.findings if f.code == "PIT101")

    busy, spare = pit101(2, 2), pit101(8, 2)
    assert "up to 30.0%" in busy.evidence and "up to 30.0%" in spare.evidence
    assert busy.severity == "low" and "take cores from compute" in busy.evidence
    assert spare.severity == "high" and "take cores" not in spare.evidence
    assert "pitstop tune" in spare.fix


def test_optimizer_state_rule_of_thumb_lives_in_its_tip():
    from pitstop.tips.pit402_optimizer_state import rule_for

    assert rule_for("SGD", {"momentum": 0.0})[0] == 0.0 and rule_for("SGD", {"momentum": 0.9})[0] == 1.0
    assert rule_for("AdamW", {"amsgrad": True})[0] == 3.0 and rule_for("Adam", {})[0] == 2.0
    assert rule_for("RMSprop", {"momentum": 0.9, "centered": True})[0] == 3.0
    assert rule_for("LBFGS", {})[0] is None
    opts = [{"class": "SGD", "mode": "for-loop", "state_ratio": 1.0, "state_bytes": 40, "options": {"momentum": 0.9}}]
    d = diagnose(_result(optimizers=opts, memory={"params": 40, "grads": 40, "optimizer_state": 40, "activations": 10,
                                                  "peak": 130}))
    assert d.errors == []
    f = next(f for f in d.findings if f.code == "PIT402")
    assert "1.0x its parameters (rule of thumb 1.0x: SGD 0x (1x with momentum))" in f.evidence


def test_every_doctor_check_is_torch_free_and_runs_on_empty_observations():
    obs = Observations(steps_observed=1, step_time=StepTime(mean=1.0, median=1.0), breakdown=Breakdown(other=1.0))
    for cls in implementations("D"):
        if not issubclass(cls, Check):
            continue  # the probes (same face) are tested below
        check = cls()
        if check.skip_reason(obs) is None:
            list(check.check(obs, Thresholds()))  # must not raise on a run that saw nothing


@pytest.mark.slow
def test_trace_writes_a_chrome_trace_of_extra_steps(cli, tmp_path):
    out = cli("doctor", "--format", "json", "--no-probes", "--steps", "2", "--warmup", "1",
              "--trace", str(tmp_path / "trace"), TINY)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert [r["kind"] for r in d["steps"]["records"]][-3:] == ["traced"] * 3
    assert d["steps"]["observed"] == 2  # traced steps do not enter the statistics
    trace = json.loads((tmp_path / "trace" / "pitstop_trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "Optimizer.step#SGD.step" in names
