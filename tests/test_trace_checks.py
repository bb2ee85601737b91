"""The face-T checks fire on synthetic traces that show their problem and stay quiet on ones
that do not; stragglers across ranks."""

from __future__ import annotations

import pytest

from trace_synth import A100, V100, training


def _codes(tmp_path, synth, name="t.json"):
    from pitstop.trace import trace

    report = trace([synth.write(tmp_path / name)])
    return {f.code for f in report.findings}, report


def test_clean_bf16_step_has_no_findings(tmp_path):
    codes, report = _codes(tmp_path, training(kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                                              kernel_us=9_900))
    assert codes == set(), report.findings
    r = report.ranks[0]
    assert r.gpu.busy > 0.95 and r.precision.by_precision == {"bf16": 1.0}


def test_input_bound_steps(tmp_path):
    codes, report = _codes(tmp_path, training(loader_us=4_000, kernel="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn",
                                              kernel_us=5_900))
    assert "PIT101" in codes
    r = report.ranks[0]
    assert r.dataloader.share == pytest.approx(0.4, abs=0.01)
    assert r.idle.input == pytest.approx(r.dataloader.share)
    f = next(f for f in report.findings if f.code == "PIT101")
    assert f.severity == "high" and f.impact == pytest.approx(0.4, abs=0.01) and "DataLoader" in f.evidence


@pytest.mark.parametrize("device", [A100, V100])
def test_fp32_gemms_on_tensor_core_gpus(tmp_path, device):
    found, report = _codes(tmp_path, training(device=device))
    # bf16 (PIT301) and, on an A100, TF32 (PIT304) are two fixes for the same fp32 GEMM time: one claim
    assert found & {"PIT301", "PIT304"} == {"PIT301"}
    f = next(f for f in report.findings if f.code == "PIT301")
    assert ("TF32" in f.evidence and "do not add" in f.evidence) == (device is A100)


def test_syncs_every_step_name_their_cause(tmp_path):
    codes, report = _codes(tmp_path, training(kernel="ampere_bf16_s16816gemm", syncs=("cudaStreamSynchronize",
                                                                                      "cudaDeviceSynchronize")))
    assert {"PIT201", "PIT203"} <= codes
    r = report.ranks[0]
    assert r.syncs.per_step == 2
    causes = {s.call: s.cause for s in r.syncs.sites}
    assert causes["cudaStreamSynchronize"] == "aten::item"
    assert r.idle.sync > 0.02


def test_pageable_copies(tmp_path):
    codes, report = _codes(tmp_path, training(kernel="ampere_bf16_s16816gemm", pageable=True, kernel_us=1_000))
    assert "PIT102" in codes
    assert report.ranks[0].copies.pageable == 4


def test_launch_bound_short_kernels(tmp_path):
    codes, report = _codes(tmp_path, training(kernel="ampere_bf16_s16816gemm", kernel_us=500, short_kernels=400,
                                              step_us=7_000))
    # fusing (PIT607) and CUDA graphs (PIT601) claim the same launch idle: one finding, fusing its option
    assert "PIT601" in codes and "PIT607" not in codes
    f = next(f for f in report.findings if f.code == "PIT601")
    assert "PIT607" in f.evidence and "fuse them" in f.fix
    la = report.ranks[0].launches
    assert la.short_kernels > 0.9 and la.elementwise > 0.9
    assert report.ranks[0].idle.launch > 0.5


def _job(tmp_path, slow_rank):
    paths = []
    for rank in range(4):
        late = rank == slow_rank  # computes 2.5 ms longer; the others wait for it inside the all-reduce
        s = training(rank=rank, world=4, kernel="ampere_bf16_s16816gemm", kernel_us=6_000,
                     compute_us_extra=2_500 if late else 0, comm_us=500 if late else 3_000, step_us=10_000, steps=5)
        paths.append(s.write(tmp_path / f"rank{rank}.pt.trace.json.gz"))
    return paths


def test_straggler_found_and_reported(tmp_path):
    from pitstop.trace import trace

    _job(tmp_path, slow_rank=2)
    report = trace([tmp_path], workers=2)
    assert [r.rank for r in report.ranks] == [0, 1, 2, 3]
    assert report.stragglers == (2,)
    f = next(f for f in report.findings if f.code == "PIT704")
    assert f.rank == 2 and "rank 2" in f.evidence


def test_balanced_job_has_no_straggler(tmp_path):
    from pitstop.trace import trace

    _job(tmp_path, slow_rank=None)
    report = trace([tmp_path], workers=1)
    assert report.stragglers == ()
    assert "PIT704" not in {f.code for f in report.findings}


def test_communication_not_overlapped(tmp_path):
    codes, report = _codes(tmp_path, training(kernel="ampere_bf16_s16816gemm", kernel_us=4_000, comm_us=5_000))
    assert "PIT702" in codes
    k = report.ranks[0].kernels
    assert k.communication_overlap == 0.0 and k.communication_share > 0.5


def test_files_of_different_jobs_get_no_straggler(tmp_path):
    from pitstop.trace import trace

    _job(tmp_path, slow_rank=2)
    other = training(rank=1, world=2, kernel="ampere_bf16_s16816gemm", comm_us=3_000, steps=5)
    other.write(tmp_path / "other_job.json")
    report = trace([tmp_path], workers=1)
    assert report.stragglers == ()
    assert any("different jobs" in n for n in report.notes)


BF16 = "ampere_bf16_s16816gemm"


def test_blocking_copies(tmp_path):
    codes, report = _codes(tmp_path, training(kernel=BF16, pageable=True, copy_us=500, kernel_us=8_000))
    assert "PIT103" in codes
    c = report.ranks[0].copies
    assert c.copy_overlap == 0.0 and c.copy_share == pytest.approx(0.05, abs=0.005)
    quiet, _ = _codes(tmp_path, training(kernel=BF16, kernel_us=9_000), "quiet.json")
    assert "PIT103" not in quiet


def test_memsets(tmp_path):
    codes, report = _codes(tmp_path, training(kernel=BF16, memsets=20, kernel_us=8_000))
    assert "PIT403" in codes
    assert report.ranks[0].copies.memsets_per_step == 20
    few, _ = _codes(tmp_path, training(kernel=BF16, memsets=1, kernel_us=8_000), "few.json")
    assert "PIT403" not in few


@pytest.mark.parametrize("kernel,fires", [("void at::native::vectorized_elementwise_kernel<4>()", True),
                                          ("void at::native::multi_tensor_apply_kernel<4>()", False)])
def test_per_parameter_optimizer(tmp_path, kernel, fires):
    codes, report = _codes(tmp_path, training(kernel=BF16, kernel_us=6_000, optimizer_kernels=80,
                                              optimizer_kernel=kernel))
    assert ("PIT501" in codes) == fires
    assert report.ranks[0].optimizer.kernels_per_step == 80


def test_several_devices_in_one_process(tmp_path):
    codes, report = _codes(tmp_path, training(kernel=BF16, kernel_us=9_000, second_device=True))
    assert "PIT701" in codes and report.ranks[0].gpu.devices == 2
    assert "PIT701" not in _codes(tmp_path, training(kernel=BF16, kernel_us=9_000), "one.json")[0]


def test_unexplained_host_idle(tmp_path):
    codes, report = _codes(tmp_path, training(kernel=BF16, kernel_us=3_000))
    assert "PIT905" in codes
    assert report.ranks[0].idle.host == pytest.approx(0.7, abs=0.01)
    f = next(f for f in report.findings if f.code == "PIT905")
    assert f.summary and f.impact == pytest.approx(0.7, abs=0.01)
    assert f.severity == "medium"  # a summary alone: at most medium, whatever its share


def test_the_host_idle_summary_never_outranks_a_cause(tmp_path):
    """PIT905 says how much is lost, not what to change: beside a cause (here the launch-bound
    PIT601) it is low and ranked last, although its share is the larger."""
    _, report = _codes(tmp_path, training(kernel=BF16, kernel_us=1_000, short_kernels=150, step_us=8_000))
    order = [f.code for f in report.findings]
    found = {f.code: f for f in report.findings}
    assert {"PIT601", "PIT905"} <= set(found)
    assert found["PIT905"].impact > found["PIT601"].impact
    assert found["PIT905"].severity == "low"
    assert all(order.index(f.code) < order.index("PIT905") for f in report.findings if not f.summary)


def test_few_kernels_are_not_launch_bound(tmp_path):
    codes, report = _codes(tmp_path, training(kernel=BF16, kernel_us=500, short_kernels=10, step_us=2_000))
    assert report.ranks[0].launches.short_kernels > 0.9 and report.ranks[0].idle.launch >= 0.05
    assert not codes & {"PIT601", "PIT607"}


def _dispatch_bound(launching: bool, steps: int = 4) -> "Synth":
    """300 operators per step, each 40 us of host time on the thread; ``launching``: each ends
    by launching a 5-us kernel (eager dispatch: the GPU waits ~35 us per operator, longer than
    the launch-gap bar), else they are CPU tensor work and one GPU kernel closes the step."""
    from trace_synth import Synth

    s = Synth()
    for k in range(steps):
        t0 = 1_000_000 + k * 13_000
        s.step(k + 1, t0, 13_000)
        t = t0 + 10
        for _ in range(300):
            ext = s.op("aten::add" if launching else "aten::mul", t, 40)
            if launching:
                s.gpu("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()",
                      t + 38, 5, launch_ts=t + 34, ext=ext)
            t += 42
        if not launching:
            ext = s.op("aten::mm", t, 20)
            s.gpu("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t + 10, 300, ext=ext)
    return s


def test_launch_idle_counts_the_operator_dispatch_before_each_launch(tmp_path):
    """A launch-bound eager step: the GPU idles ~35 us before each kernel while the host
    dispatches the operator that launches it; those gaps are longer than the launch-gap bar,
    and are still launch idle (CUDA graphs remove them), so PIT601 sizes them, not 'host'."""
    _, report = _codes(tmp_path, _dispatch_bound(True))
    r = report.ranks[0]
    assert r.gpu.busy < 0.15 and r.idle.launch > 0.8 and r.idle.host < 0.1
    assert r.idle.input + r.idle.sync + r.idle.launch + r.idle.host == pytest.approx(r.gpu.idle)
    f = next(f for f in report.findings if f.code == "PIT601")
    assert f.impact == pytest.approx(r.idle.launch) and f.severity == "high"


def test_operators_that_launch_nothing_are_host_time_not_launch(tmp_path):
    _, report = _codes(tmp_path, _dispatch_bound(False), "cpu_ops.json")
    r = report.ranks[0]
    assert r.idle.host > 0.9 and r.idle.launch < 0.01
    assert "PIT601" not in {f.code for f in report.findings}
