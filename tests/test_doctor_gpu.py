"""The doctor's GPU evidence (issue 27): the profiled steps' trace, analysed by pitstop.trace,
decides the GPU facts of the doctor's findings. Each test hands a trace file (synthetic rows of
the issue's table, or a recorded GPU trace of ../shared/traces/) to the doctor as its profiled
window and checks the merged findings, on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor_obs import loader, model, observations, probe, site
from gpu_rows import H100, cuda_graph, device_sync, launch_bound, starved_input, tf32_convs
from pitstop.doctor.analysis.diagnosis import diagnose
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord
from pitstop.doctor.analysis.evidence import gpu_findings, profiled_window, step_seconds

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
RESNET = SHARED / "kineto-tb_plugin" / "samples"


def _cuda_obs(**fields) -> Observations:
    return observations(device="cuda", device_name=H100["name"], capability=[9, 0], **fields)


def _at_step(obs: Observations, seconds: float) -> Observations:
    """``obs`` with every time scaled so that its observed step takes ``seconds`` (its shares kept)."""
    import dataclasses

    from pitstop.doctor.analysis.records import Breakdown, StepTime

    k = seconds / obs.step_time.median
    b = obs.breakdown
    return dataclasses.replace(
        obs, step_time=StepTime(**{f: getattr(obs.step_time, f) * k for f in ("median", "p90", "mean", "min", "max")}),
        breakdown=Breakdown(**{f.name: getattr(b, f.name) * k for f in dataclasses.fields(b)}),
        syncs=[dataclasses.replace(x, seconds=x.seconds * k) for x in obs.syncs],
        cuda_calls=[dataclasses.replace(x, seconds=x.seconds * k) for x in obs.cuda_calls])


def _diagnose(obs: Observations, trace: Path | None, *, observed: float | None = None):
    """The doctor's parent on a CUDA run whose profiled window is the file ``trace``; its observed
    steps took ``observed`` seconds (default: what the profiled steps took, an undistorted window)."""
    if trace is not None and trace.exists():
        rank, _ = profiled_window(trace)
        if rank is not None and (observed or step_seconds(rank)):
            obs = _at_step(obs, observed or step_seconds(rank))
    spec = RunSpec(script="train.py", steps=5, warmup=0)
    steps = [StepRecord(index=i, kind="observed", wall=0.1) for i in range(5)]
    result = RunResult(spec=spec, status="stopped", steps=steps, device="cuda", observations=obs,
                       trace_path=str(trace) if trace else None)
    d = diagnose(result)
    assert d.errors == []
    return d


def _codes(d) -> list[str]:
    return [f.code for f in d.findings]


def _one(d, code):
    found = [f for f in d.findings if f.code == code]
    assert len(found) == 1, _codes(d)
    return found[0]


def _trace_impact(path: Path, code: str) -> float:
    rank, why = profiled_window(path)
    assert why is None
    return next(f.impact for f in gpu_findings(rank) if f.code == code)


def test_starved_input_keeps_pit101_with_the_gpu_wait_and_no_pit304_on_tf32_convs(tmp_path):
    trace = starved_input().write(tmp_path / "starved.json")
    obs = _cuda_obs(loaders=[loader(num_workers=0)], breakdown={"data": 0.08},
                    kernels={"matmul": {"float32": 2}, "conv": {"float32": 20}},
                    settings={"tf32_cudnn": True, "cpu_cores": 16})
    without = _diagnose(obs, None)
    assert "PIT304" in _codes(without)  # the settings alone: fp32 matmuls, precision 'highest'
    d = _diagnose(obs, trace)
    f = _one(d, "PIT101")
    assert f.impact_share == pytest.approx(_trace_impact(trace, "PIT101"))
    assert "GPU (profiled steps)" in f.evidence and "num_workers=0" in f.evidence
    assert "PIT304" not in _codes(d)  # the convolution kernels ran in TF32
    assert any(s.code == "PIT304" and s.check == "GPU evidence" for s in d.skipped)


def test_device_sync_is_pit203_with_the_measured_gpu_wait_and_no_pit101(tmp_path):
    trace = device_sync().write(tmp_path / "sync.json")
    calls = [site("cuda.synchronize", seconds=0.028), site("cuda.empty_cache", seconds=0.004, where="train.py:31")]
    obs = _cuda_obs(breakdown={"host": 0.0226}, cuda_calls=calls, syncs=[calls[0]])
    without = _diagnose(obs, None)
    assert "PIT101" in _codes(without)  # host timers: "host work before each forward"
    d = _diagnose(obs, trace)
    assert "PIT101" not in _codes(d)  # no input pipeline the GPU waits for
    f = _one(d, "PIT203")
    rank, _ = profiled_window(trace)
    assert f.impact_share == pytest.approx(_trace_impact(trace, "PIT203"))
    assert f.impact_share > 0.2
    assert f.impact_seconds == pytest.approx(f.impact_share * step_seconds(rank))
    assert "train.py:20" in f.where and "train.py:31" in f.where


def test_launch_bound_step_gets_pit601_with_cuda_graphs_as_the_fix(tmp_path):
    trace = launch_bound().write(tmp_path / "launch.json")
    d = _diagnose(_cuda_obs(), trace)
    f = _one(d, "PIT601")
    assert f.impact_share == pytest.approx(_trace_impact(trace, "PIT601"))
    assert "reduce-overhead" in f.fix and "CUDA graphs" in f.fix
    assert d.observations.gpu.gpu.busy < 0.3


def test_tf32_convolutions_are_not_pit304(tmp_path):
    trace = tf32_convs().write(tmp_path / "tf32.json")
    obs = _cuda_obs(kernels={"matmul": {"float32": 1}, "conv": {"float32": 9}})
    assert "PIT304" in _codes(_diagnose(obs, None))
    d = _diagnose(obs, trace)
    assert "PIT304" not in _codes(d)
    assert d.observations.gpu.precision.by_precision.get("tf32", 0) > 0.99


def test_cuda_graph_kernels_count_as_busy_in_the_step_that_replayed_them(tmp_path):
    trace = cuda_graph().write(tmp_path / "graph.json")
    d = _diagnose(_cuda_obs(), trace)
    gpu = d.observations.gpu
    assert gpu.gpu.busy > 0.9 and gpu.launches.kernels_per_step == pytest.approx(200)
    assert gpu.gpu.busy_launched is not None and gpu.gpu.busy_launched > 0.9
    assert not {"PIT601", "PIT905"} & set(_codes(d))


def test_the_evidence_crosses_the_process_boundary_as_json(tmp_path):
    rank, _ = profiled_window(launch_bound().write(tmp_path / "launch.json"))
    obs = _cuda_obs()
    obs.gpu = rank
    back = Observations.from_dict(obs.to_dict())
    assert back.gpu == rank


def test_an_unreadable_window_is_a_note_and_the_live_findings_stay(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    obs = _cuda_obs(loaders=[loader(num_workers=0)], breakdown={"data": 0.08})
    d = _diagnose(obs, bad)
    assert d.observations.gpu is None and "PIT101" in _codes(d)
    assert any("could not be analysed" in n for n in d.observations.notes)


@pytest.mark.skipif(not RESNET.is_dir(), reason="../shared/traces not present")
def test_recorded_resnet50_with_no_workers_is_pit101_at_the_trace_share():
    trace = RESNET / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
    obs = observations(device="cuda", device_name="Tesla V100-DGXS-32GB", capability=[7, 0],
                       loaders=[loader(num_workers=0)], breakdown={"data": 0.03})
    d = _diagnose(obs, trace)
    f = _one(d, "PIT101")
    share = d.observations.gpu.dataloader.share
    assert f.impact_share == pytest.approx(share)
    assert 0.25 < share < 0.40  # the TensorBoard plugin: DataLoader 33.37% of the step (README)


@pytest.mark.skipif(not RESNET.is_dir(), reason="../shared/traces not present")
def test_recorded_resnet50_with_workers_drops_the_host_timers_data_wait():
    trace = RESNET / "resnet50_num_workers_4" / "worker0.1623212756351.pt.trace.json.gz"
    obs = observations(device="cuda", device_name="Tesla V100-DGXS-32GB", capability=[7, 0],
                       loaders=[loader(num_workers=4)], breakdown={"data": 0.012})
    assert "PIT101" in _codes(_diagnose(obs, None))
    d = _diagnose(obs, trace)
    assert "PIT101" not in _codes(d)  # the plugin: DataLoader 0.84% of the step
    assert d.observations.gpu.gpu.busy > 0.5


def test_the_doctor_never_counts_its_own_lines_as_the_scripts_sync_sites():
    from pitstop.doctor.record import syncs

    assert syncs.own_site(f"{syncs.__file__}:45")  # a wrapper's line, seen by the sync-debug warnings
    assert not syncs.own_site("/home/user/train.py:12")
    from pitstop.examples import cnn

    assert not syncs.own_site(f"{cnn.__file__}:61")  # pitstop's bundled scripts are scripts


def test_the_compile_skip_reason_follows_the_device():
    from pitstop.tips.pit601_compile import CompileCheck

    assert "small CPU" in CompileCheck().skip_reason(observations())
    assert "CPU" not in CompileCheck().skip_reason(_cuda_obs())


def test_the_report_has_a_gpu_section_in_text_html_and_json(tmp_path):
    import io
    import json

    import jsonschema

    from pitstop.report.doctor_html import doctor_html
    from pitstop.report.doctor_terminal import render

    d = _diagnose(_cuda_obs(loaders=[loader(num_workers=0)], breakdown={"data": 0.08}),
                  starved_input().write(tmp_path / "starved.json"))
    out = io.StringIO()
    render(d, out)
    text = out.getvalue()
    assert "GPU busy" in text and "19.0%" in text and "input 80.0%" in text and "tf32" in text
    assert "GPU (profiled steps" in doctor_html(d)
    doc = json.loads(json.dumps(d.to_dict()))
    jsonschema.validate(doc, json.loads((Path(__file__).resolve().parents[1] / "docs" / "doctor-schema.json").read_text()))
    assert doc["gpu"]["busy"] == pytest.approx(0.19) and doc["gpu"]["top_kernels"][0]["calls"] == 20


def test_the_stack_sampler_stays_closed_while_paused_for_the_profiled_steps():
    from pitstop.doctor.record.stacks import StackSampler

    s = StackSampler()
    s.paused = True
    s.open()
    assert not s.is_open
    s.paused = False
    s.open()
    assert s.is_open


H100_QWEN = SHARED / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.skipif(not H100_QWEN.is_file(), reason="../shared/traces not present")
def test_recorded_h100_bf16_window_overrules_the_settings_and_host_timers():
    obs = _cuda_obs(kernels={"matmul": {"float32": 4, "bfloat16": 96}}, breakdown={"host": 0.02})
    without = _diagnose(obs, None)
    assert {"PIT304", "PIT101"} <= set(_codes(without))
    d = _diagnose(obs, H100_QWEN)
    assert not {"PIT304", "PIT101"} & set(_codes(d))  # bf16 GEMMs (TraceLens: sm90 bf16 gemm), no input wait
    assert d.gpu.busy == pytest.approx(0.918, abs=0.01)  # TraceLens: busy 91.44% of the step's span


def test_merge_roles_one_finding_per_code(tmp_path):
    from pitstop.doctor.analysis.check import Thresholds
    from pitstop.findings import Finding
    from pitstop.doctor.analysis.evidence import merge

    rank, _ = profiled_window(launch_bound().write(tmp_path / "launch.json"))
    gpu = gpu_findings(rank)  # PIT601 and PIT607 on this window
    live = Finding(code="PIT601", title="live", evidence="probe", fix="f", severity="low", impact_share=0.01)
    th = Thresholds()
    out, dropped = merge([("live", live)], {}, gpu, rank, th)
    got = {f.code: f for f in out}
    assert got["PIT601"].impact_share == 0.01 and "GPU (profiled steps)" in got["PIT601"].evidence
    out, _ = merge([("both", live)], {}, gpu, rank, th)
    assert {f.code: f for f in out}["PIT601"].impact_share == pytest.approx(rank.idle.launch)
    out, _ = merge([], {"PIT601": "live"}, gpu, rank, th)  # a live check measured and found nothing
    assert "PIT601" not in [f.code for f in out] and "PIT607" in [f.code for f in out]
    out, dropped = merge([("trace", Finding(code="PIT101", title="t", evidence="e", fix="f", severity="high"))],
                         {}, gpu, rank, th)
    assert "PIT101" not in [f.code for f in out] and dropped[0][0] == "PIT101"


LIVE_SYNC = '''
import torch
from torch import nn
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1000):
    x = torch.randn(256, 512, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
'''


@pytest.mark.slow
def test_live_cuda_doctor_reads_its_own_profiled_steps(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: the GPU evidence path is tested above on recorded and synthetic traces")
    from pitstop.doctor.run.runner import run_script

    script = tmp_path / "sync_loop.py"
    script.write_text(LIVE_SYNC)
    d = diagnose(run_script(RunSpec(script=str(script), steps=5, warmup=2, probes=False)))
    assert d.observations.gpu is not None and d.gpu.steps >= 1
    assert "PIT203" in _codes(d) and "PIT101" not in _codes(d)
    assert not any("/pitstop/doctor/" in s.where for s in d.observations.syncs + d.observations.cuda_calls)
    assert d.result.trace_path is None  # the doctor's own trace file is removed once read


# -- issue 27's four loops, recorded on an NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130) by
# benchmarks/gpu_doctor_loops.py: each profiled window injected as the doctor's own (README there)
H100_RUN = Path(__file__).resolve().parent / "fixtures" / "gpu_h100"
GPT = "gpt_sync.py"


def _trace_report(loop: str):
    from pitstop.trace import trace

    return trace([H100_RUN / f"{loop}.json.gz"])


def _gpt_obs(**fields) -> Observations:
    """What the live doctor recorded on the gpt_sync loop (fp32 GPT, synchronize + empty_cache
    every step, batches made on the GPU, no DataLoader), --no-probes."""
    sync = site("cuda.synchronize", every=5, seconds=0.0088, where=f"{GPT}:91")
    calls = [sync, site("cuda.empty_cache", every=5, where=f"{GPT}:92")]
    return _cuda_obs(models=[model("GPT", params=27_435_008)], breakdown={"host": 0.0038},
                     kernels={"matmul": {"float32": 81}}, syncs=[sync], cuda_calls=calls,
                     flops={"per_step": 612032839680, "achieved_per_s": 2.65e13, "peak_per_s": 6.7e13, "mfu": 0.395,
                            "peak_source": "H100 dense float32 peak (NVIDIA datasheet)"}, **fields)


def test_recorded_h100_gpt_sync_is_pit301_first_in_pitstop_trace_and_in_the_doctor():
    report = _trace_report("gpt_sync")
    assert report.findings[0].code == "PIT301"  # fp32 sgemm kernels (sm80_xmma_gemm_f32f32, cutlass simt sgemm)
    d = _diagnose(_gpt_obs(), H100_RUN / "gpt_sync.json.gz")
    assert d.findings[0].code == "PIT301" and "PIT101" not in _codes(d)
    trace301 = next(f for f in report.findings if f.code == "PIT301")
    assert _one(d, "PIT301").impact_share == pytest.approx(trace301.impact)
    # fp32 matmuls under default settings run without TF32: PIT304 is right here, as an option of
    # PIT301 (bf16): the same GEMM time, one claim
    assert "PIT304" not in _codes(d) and "set_float32_matmul_precision" in _one(d, "PIT301").fix
    # a summary (PIT905, low MFU) never outranks a cause
    assert all(f.severity == "low" for f in d.findings if f.summary)


def test_recorded_h100_gpt_sync_pit203_impact_is_the_traces_wait_after_syncs():
    report = _trace_report("gpt_sync")
    d = _diagnose(_gpt_obs(), H100_RUN / "gpt_sync.json.gz")
    f, t = _one(d, "PIT203"), next(f for f in report.findings if f.code == "PIT203")
    rank = report.ranks[0]
    assert f.impact_share == t.impact == pytest.approx(rank.idle.sync)  # one device sync kind per step
    assert f.impact_seconds == pytest.approx(t.impact * rank.window.seconds / rank.steps)
    assert f"{GPT}:91" in f.where


def test_recorded_h100_pit301_with_a_probe_the_probe_decides():
    trace = H100_RUN / "gpt_sync.json.gz"
    flat = _diagnose(_gpt_obs(probes={"precision": probe("fp32", "bfloat16", 1.02)}), trace)
    assert "PIT301" not in _codes(flat)  # measured: no gain above the bar, whatever the kernels
    fast = _diagnose(_gpt_obs(probes={"precision": probe("fp32", "bfloat16", 1.6)}), trace)
    f = _one(fast, "PIT301")
    assert "probe" in f.evidence and "GPU (profiled steps)" in f.evidence
    assert f.impact_share != pytest.approx(next(t.impact for t in _trace_report("gpt_sync").findings
                                                if t.code == "PIT301"))


@pytest.mark.parametrize("loop, top, absent", [
    ("starved", "PIT101", {"PIT304", "PIT905"}),  # cuDNN convs run TF32
    ("resnet_good", "PIT601", {"PIT304", "PIT101"}),  # bf16, 8 workers: launch-bound
    ("ddp", "PIT601", {"PIT304", "PIT101"}),  # fp32 convs in TF32 kernels
])
def test_recorded_h100_loops_get_the_traces_answer(loop, top, absent):
    report = _trace_report(loop)
    assert report.findings[0].code == top
    obs = _cuda_obs(models=[model(conv2d=20)], kernels={"matmul": {"float32": 1}, "conv": {"float32": 20}},
                    loaders=[loader(num_workers=0 if loop == "starved" else 8)],
                    breakdown={"data": 0.1 if loop == "starved" else 0.0005})
    d = _diagnose(obs, H100_RUN / f"{loop}.json.gz")
    assert d.findings[0].code == top and not absent & set(_codes(d))
    codes = _codes(d)
    for f in d.findings:  # PIT905 (the GPU waits for host code) comes low, after every cause
        if f.summary:
            assert f.severity == "low" and all(codes.index(c.code) < codes.index(f.code) for c in d.findings
                                               if not c.summary and c.impact_kind == "time")
    assert d.gpu.busy == pytest.approx(report.ranks[0].gpu.busy)
    from pitstop.findings import Finding

    back = [Finding.from_dict(x) for x in d.to_dict()["findings"]]  # a node report read back by pitstop merge
    assert [(f.code, f.summary) for f in back] == [(f.code, f.summary) for f in d.findings]


def test_recorded_h100_resnet_good_pit601_is_the_launch_idle_of_the_gpu_section():
    """The well-written ResNet on the H100 (GPU busy 11%): the GPU idles between short kernels
    while the host dispatches them (gaps of 20-500 us under the profiler); PIT601's impact is
    that idle, the number the GPU section prints as 'launch'."""
    d = _diagnose(_cuda_obs(loaders=[loader(num_workers=8)]), H100_RUN / "resnet_good.json.gz")
    f, split = _one(d, "PIT601"), d.gpu.idle_by_cause
    assert f.impact_share == pytest.approx(split.launch)
    assert split.input + split.sync + split.launch + split.host == pytest.approx(d.gpu.idle)
    assert d.gpu.busy < 0.15 and split.launch > 0.5 > split.host  # most of the idle is the launch path
    assert "reduce-overhead" in f.fix


def test_the_profiled_window_is_analysed_its_cost_noted_and_its_own_file_removed(tmp_path):
    """What the child does with its profiled steps on CUDA (doctor/collect.py), on the recorded
    H100 gpt_sync window: Observations.gpu, a note with the window's cost and how much slower
    its steps ran than the observed ones, and the doctor's own trace removed once read."""
    import shutil
    from types import SimpleNamespace

    from pitstop.doctor.record import collect
    from pitstop.stats import StepTime

    own = tmp_path / "pitstop-gpu-own"
    own.mkdir()
    path = shutil.copy(H100_RUN / "gpt_sync.json.gz", own / "pitstop_trace.json.gz")
    traced = [SimpleNamespace(kind="traced", wall=w) for w in (0.027, 0.026, 0.026)]
    inst = SimpleNamespace(trace_path=str(path), records=traced,
                           profiled=SimpleNamespace(own_trace=True, trace_path=str(path)))
    o = Observations(device="cuda", step_time=StepTime.of([0.013, 0.013, 0.013]))
    collect._gpu_evidence(inst, o)
    assert o.gpu is not None and o.gpu.gpu.busy == pytest.approx(_trace_report("gpt_sync").ranks[0].gpu.busy)
    note = next(n for n in o.notes if n.startswith("GPU evidence"))
    assert "3 profiled steps" in note and "0.08 s" in note and "2.0x the observed step" in note
    assert not own.exists() and inst.profiled.trace_path is None
