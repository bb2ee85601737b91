"""The doctor reports the program the user runs, in the user's seconds (issue 39), on synthetic
profiled windows (``tests/gpu_rows.py``) and typed observations, on CPU:

- a CUDA-graph step and a compiled step are not told to do what they do;
- an eager window of a script that compiles raises the "instrumentation changed the program" note;
- a profiled window 3x slower than the observed step has its impacts re-based on the observed
  step, no finding claims more than the step and the causes never add past it;
- one cost, one finding: PIT301 (bf16) and PIT304 (TF32) on the same fp32 GEMMs, fused and
  foreach for the same optimizer.
"""

from __future__ import annotations

import pytest

from doctor_obs import findings_of, observations, probe
from gpu_rows import H100, compiled_step, fp32_gemms, graphed_step, launch_bound
from pitstop.doctor.analysis.compile_records import CompileRecord
from pitstop.doctor.analysis.diagnosis import diagnose
from pitstop.doctor.analysis.evidence import gpu_findings, profiled_window, step_seconds
from pitstop.doctor.analysis.records import Overhead
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord
from pitstop.findings import Finding
from pitstop.severity import SEVERITIES, settle, within_step
from pitstop.thresholds import Thresholds
from test_doctor_gpu import _at_step

COMPILES = CompileRecord(compiled=True, graph_breaks=0, calls=10, calls_per_step=1.0, paired_calls_per_step=1.0,
                         bare_calls_per_step=1.0)


def _diagnose(tmp_path, synth, *, observed: float | None = None, **fields):
    """The doctor's parent on a CUDA run whose profiled window is ``synth``; its observed steps
    took ``observed`` seconds (default: what the profiled steps took)."""
    trace = synth.write(tmp_path / "window.json")
    obs = observations(device="cuda", device_name=H100["name"], capability=[9, 0], **fields)
    rank, _ = profiled_window(trace)
    obs = _at_step(obs, observed or step_seconds(rank))
    result = RunResult(spec=RunSpec(script="train.py", steps=5, warmup=0), status="stopped", device="cuda",
                       steps=[StepRecord(index=i, kind="observed", wall=0.1) for i in range(5)], observations=obs,
                       trace_path=str(trace))
    d = diagnose(result)
    assert d.errors == []
    return d


def _one(d, code):
    found = [f for f in d.findings if f.code == code]
    assert len(found) == 1, [f.code for f in d.findings]
    return found[0]


def _within_the_step(d) -> None:
    time = [f for f in d.findings if f.impact_kind == "time" and f.impact_share is not None]
    assert all(0 <= f.impact_share <= 1 for f in time)
    assert sum(f.impact_share for f in time if not f.summary) <= 1 + 1e-9
    step = d.observations.step_time.median
    assert all(f.impact_seconds is None or f.impact_seconds <= step + 1e-12 for f in time)


def test_a_cuda_graph_step_is_told_what_is_left_not_to_use_cuda_graphs(tmp_path):
    d = _diagnose(tmp_path, graphed_step(), compile=CompileRecord(**{**COMPILES.__dict__, "replays_per_step": 2.0,
                                                                      "paired_replays_per_step": 2.0,
                                                                      "bare_replays_per_step": 2.0}))
    f = _one(d, "PIT601")
    assert "between the CUDA graphs" in f.title and "already replays CUDA graphs" in f.evidence
    assert "reduce-overhead" not in f.fix and "replay the step as CUDA graphs" not in f.fix
    assert "optimizer" in f.fix
    assert d.gpu.graph_launches_per_step == 2 and d.gpu.compiled_per_step == 1
    assert d.fidelity.changed == () and d.gpu.note is None  # the window ran the observed program
    # PIT607's fusion claims the same launch idle as PIT601: one finding, fusing an option of it
    assert "PIT607" not in [x.code for x in d.findings] and "PIT607" in f.fix
    assert any(s.code == "PIT607" and "same time" in s.reason for s in d.skipped)
    _within_the_step(d)


def test_a_compiled_step_is_told_reduce_overhead_not_to_compile_it(tmp_path):
    d = _diagnose(tmp_path, compiled_step(), compile=COMPILES)
    f = _one(d, "PIT601")
    assert "reduce-overhead" in f.fix and "on the torch.compile call you have" in f.fix
    assert "PIT607" not in [x.code for x in d.findings]  # Triton kernels are fusion's output
    assert not any("torch.compile the function" in x.fix for x in d.findings)
    assert d.fidelity.changed == ()


@pytest.mark.parametrize("kind", ["graphed", "compiled"])
def test_a_small_compiled_step_is_launch_bound_with_few_kernels(tmp_path, kind):
    """The H200 run of 2026-11-28 (docs/gpu/README.md): compiled loops of 37 and 40 kernels per
    step, the GPU idle 67% between launches, got no PIT601 (under the 50-kernel floor meant for
    a few eager launches) and a summary (PIT905) first. A compiled step has few kernels because
    compiling fused them: the floor is waived there, not for the same few kernels run eagerly."""
    if kind == "graphed":
        synth = graphed_step(per_graph=15, optimizer=5, gap=300)
        rec = CompileRecord(**{**COMPILES.__dict__, "replays_per_step": 2.0, "paired_replays_per_step": 2.0,
                               "bare_replays_per_step": 2.0})
    else:
        synth, rec = compiled_step(kernels=30), COMPILES
    d = _diagnose(tmp_path, synth, compile=rec)
    assert d.gpu.kernels_per_step < Thresholds().launch_min_kernels
    f = _one(d, "PIT601")
    assert ("between the CUDA graphs" in f.title) == (kind == "graphed")
    assert d.findings[0].code == "PIT601" and not d.findings[0].summary
    eager = _diagnose(tmp_path, compiled_step(compiled=False, kernels=30))
    assert "PIT601" not in [x.code for x in eager.findings]
    _within_the_step(d)


def test_an_eager_window_of_a_script_that_compiles_is_a_loud_note_and_lowers_the_findings(tmp_path):
    plain = _diagnose(tmp_path, compiled_step(compiled=False))  # a script that does not compile: its window
    d = _diagnose(tmp_path, compiled_step(compiled=False), compile=COMPILES)
    assert d.fidelity.changed and "the profiled window ran another program" in d.fidelity.changed[0]
    assert "0.0 compiled graph runs per step there against 1.0" in d.gpu.note
    assert "the profiled window ran another program" in d.to_dict()["fidelity"]["note"]
    before = {f.code: f.severity for f in plain.findings if f.impact_kind == "time"}
    after = {f.code: f.severity for f in d.findings if f.impact_kind == "time"}
    assert before and set(before) == set(after)
    for code, sev in before.items():  # a level lower each (low stays low)
        assert after[code] == SEVERITIES[min(SEVERITIES.index(sev) + 1, 2)], code
    assert any("changed the program" in f.evidence for f in d.findings)


def test_hooks_that_change_the_compiled_calls_are_named(tmp_path):
    changed = CompileRecord(**{**COMPILES.__dict__, "paired_calls_per_step": 3.0, "bare_calls_per_step": 1.0})
    d = _diagnose(tmp_path, compiled_step(), compile=changed)
    assert any("the doctor's hooks changed the program: 3.0 compiled calls per observed step against 1.0" in c
               for c in d.fidelity.changed)


def test_a_profiled_window_3x_slower_is_rebased_on_the_observed_step(tmp_path):
    window = launch_bound()
    rank, _ = profiled_window(window.write(tmp_path / "w.json"))
    profiled = step_seconds(rank)
    busy = rank.gpu.busy_seconds / rank.steps
    fair = _diagnose(tmp_path, launch_bound())
    d = _diagnose(tmp_path, launch_bound(), observed=profiled / 3)
    assert d.fidelity.distortion == pytest.approx(3.0) and d.fidelity.distorted
    assert "3.0x the observed step" in d.gpu.note and d.gpu.observed_seconds == pytest.approx(profiled / 3)
    f, g = _one(d, "PIT601"), _one(fair, "PIT601")
    # the profiler's extra time is GPU idle: the launch idle keeps the observed step's share of it
    scale = (profiled / 3 - busy) / (profiled - busy)
    assert f.impact_seconds == pytest.approx(rank.idle.launch * profiled * scale)
    assert f.impact_share == pytest.approx(f.impact_seconds / (profiled / 3))
    assert f.impact_share < g.impact_share and f.impact_seconds < g.impact_seconds
    assert "of the observed step" in f.evidence
    # the GPU-derived severities drop a level beside the distortion note
    assert SEVERITIES.index(f.severity) == min(SEVERITIES.index(g.severity) + 1, 2) or g.severity == "low"
    _within_the_step(d)
    _within_the_step(fair)


def test_pit301_and_pit304_on_one_fp32_gemm_trace_are_one_claim(tmp_path):
    trace = fp32_gemms().write(tmp_path / "gemm.json")
    rank, _ = profiled_window(trace)
    raw = {f.code: f for f in gpu_findings(rank)}
    assert {"PIT301", "PIT304"} <= set(raw)  # both checks see the same fp32 GEMM time
    d = _diagnose(tmp_path, fp32_gemms(), kernels={"matmul": {"float32": 4}})
    f = _one(d, "PIT301")
    assert "PIT304" not in [x.code for x in d.findings]
    assert "TF32" in f.evidence and "do not add" in f.evidence and "set_float32_matmul_precision" in f.fix
    assert f.impact_share == pytest.approx(max(raw["PIT301"].impact, raw["PIT304"].impact))
    _within_the_step(d)
    # pitstop trace says the same: one claim for one cost
    from pitstop.trace import trace as trace_report

    codes = [x.code for x in trace_report([trace]).findings]
    assert "PIT301" in codes and "PIT304" not in codes


def test_claims_past_the_step_are_cut_to_what_is_left_in_rank_order():
    th = Thresholds()

    def time(code, share, summary=False):
        return Finding(code=code, title=code, evidence="e", fix="f", severity="high", impact_share=share,
                       impact_seconds=share * 0.01, summary=summary)

    out = {f.code: f for f in settle([time("PIT101", 0.7), time("PIT601", 0.6), time("PIT905", 1.4, summary=True)], th)}
    assert out["PIT101"].impact_share == pytest.approx(0.7)
    cut = out["PIT601"]
    assert cut.impact_share == pytest.approx(0.3) and cut.impact_seconds == pytest.approx(0.003)
    assert "cut from 60.0% to 30.0%" in cut.evidence
    assert out["PIT905"].impact_share == 1.0  # a summary is capped at the step, never counted with the causes
    # below the medium cut-off the cut finding's severity follows its share
    small = {f.code: f for f in within_step([time("PIT101", 0.99), time("PIT601", 0.5)], th)}
    assert small["PIT601"].severity == "low" and small["PIT601"].impact_share == pytest.approx(0.01)


def test_fused_and_foreach_for_the_same_optimizer_are_one_finding():
    from doctor_obs import optimizer
    from pitstop.tips.pit501_fused_optimizer import FusedOptimizerCheck

    p = probe("for-loop", "fused", 1.8)
    p = type(p)(**{**p.__dict__, "seconds": {"for-loop": 0.02, "fused": 0.01, "foreach": 0.013},
                   "speedups": {**p.speedups, "foreach": type(p.speedups["fused"])(ratio=1.5, low=1.3, high=1.7)}})
    obs = observations(optimizers=[optimizer(mode="for-loop")], probes={"optimizer": p}, breakdown={"optimizer": 0.05})
    (f,) = findings_of(FusedOptimizerCheck, obs)
    assert "fused=True" in f.fix and "foreach=True" in f.fix
    assert "foreach mode: 1.50x" in f.evidence and "do not add" in f.evidence
    assert f.impact_share == pytest.approx(0.5 * (1 - 1 / 1.8))  # the best option's gain, not a sum


def test_live_losses_without_a_growing_graph_are_no_pit202():
    from pitstop.tips.pit202_retained_graph import RetainedGraphCheck

    flat = observations(graph={"nodes": [66, 66, 66], "steps": [2, 6, 10], "live_losses": 9, "losses_tracked": 9})
    assert findings_of(RetainedGraphCheck, flat) == []  # a compiled/graphed step's static outputs
    grows = observations(graph={"nodes": [66, 132, 198], "steps": [2, 6, 10], "live_losses": 9, "losses_tracked": 9})
    (f,) = findings_of(RetainedGraphCheck, grows)
    assert "9 of the 9 earlier steps' loss tensors" in f.evidence


def test_the_doctors_own_overhead_is_reported(tmp_path):
    over = Overhead(pairs=3, observed=0.0103, bare=0.0100, low=1.01, high=1.05, observed_cpu=0.0052, bare_cpu=0.005)
    d = _diagnose(tmp_path, launch_bound(), overhead=over)
    note = next(n for n in d.observations.notes if n.startswith("the doctor's own hooks"))
    assert "+4.0% CPU time" in note and "+3.0% wall time" in note and "from 3 observed step(s)" in note
    noisy = Overhead(pairs=3, observed=0.0153, bare=0.0109, low=0.32, high=3.98)  # a busy machine
    d = _diagnose(tmp_path, launch_bound(), overhead=noisy)
    note = next(n for n in d.observations.notes if n.startswith("the doctor's own hooks"))
    assert "too noisy to tell" in note and "+40" not in note and "CPU" not in note


def test_the_report_says_so_beside_the_gpu_section(tmp_path):
    import io
    import json
    from pathlib import Path

    import jsonschema

    from pitstop.report.doctor_html import doctor_html
    from pitstop.report.doctor_terminal import render

    rank, _ = profiled_window(launch_bound().write(tmp_path / "w.json"))
    d = _diagnose(tmp_path, launch_bound(), observed=step_seconds(rank) / 3, compile=COMPILES)
    out = io.StringIO()
    render(d, out)
    text = out.getvalue()
    assert "3.0x the observed step" in text and "profiled steps 3.00x it" in text
    assert "compiled graph runs per observed step 1.0 (1.0 with the doctor's hooks against 1.0 without" in text
    assert "3.0x the observed step" in doctor_html(d)
    doc = json.loads(json.dumps(d.to_dict()))
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "doctor-schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["fidelity"]["distortion"] == pytest.approx(3.0) and doc["gpu"]["distortion"] == pytest.approx(3.0)
