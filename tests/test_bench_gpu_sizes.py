"""The GPU-sized workloads of PIT301 and PIT104 (issue 29: on an H100 the CPU sizes took
1.7-4.3 ms per step, launch overhead, and hid the claims) run here, on the CPU, at tiny size:
the benchmark code takes its ``ctx.cuda`` branch with every tensor on the CPU. No timing is
asserted; the test shows the GPU branch builds, runs and describes the workload it ran."""

from __future__ import annotations

import pytest

from pitstop.bench.runner import select
from pitstop.bench.timing import BenchContext


class GpuSizedOnCpu(BenchContext):
    """Takes the benchmarks' CUDA branch (sizes, autocast) while the tensors stay on the CPU."""

    @property
    def cuda(self) -> bool:
        return True

    def sync(self) -> None:
        pass


@pytest.mark.parametrize("code, says", [
    ("PIT301", ["MLP block(s)", "tokens", "matmul-bound", "no TF32"]),
    ("PIT104", ["autocast (both layouts)", "Conv2d(16, 16"]),
    # PIT601's GPU branch compiles a bf16 GPT: minutes of Inductor on 2 CPU cores (283 s measured), so it
    # runs where it is meant to, in benchmarks/gpu_check.sh's bench stage on a GPU
])
def test_gpu_branch_runs_tiny_and_names_its_workload(code, says):
    (cls,) = select([code])
    cpu = cls().run(BenchContext("cpu", "tiny"))
    gpu = cls().run(GpuSizedOnCpu("cpu", "tiny"))
    assert all(s in gpu.workload for s in says), gpu.workload
    assert gpu.workload != cpu.workload and all(s not in cpu.workload for s in says[:1]), cpu.workload
    names = {m.name for m in gpu.measurements}
    assert set(cls.claim.baseline_names) | set(cls.claim.candidate_names) <= names
    assert all(m.samples and min(m.samples) > 0 for m in gpu.measurements if not m.info)
    assert all(gpu.checks.values()), gpu.checks
