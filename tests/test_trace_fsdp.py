"""FSDP's collectives in a trace (pitstop/trace/collectives.py, PIT705's trace face) on synthetic
NCCL/RCCL traces of an FSDP2 job: each unit's all-gather before its forward and reduce-scatter
after its backward, either overlapped with the neighbouring unit's compute or not. The real
CPU (gloo) trace of a torchrun FSDP2 job is read in tests/test_doctor_fsdp.py."""

from __future__ import annotations

import pytest

from trace_synth import Synth
from pitstop.thresholds import Thresholds
from pitstop.trace import trace
from pitstop.trace.analyze import analyze_file
from pitstop.trace.collectives import fsdp_unit, kernel_kind, op_kind

NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
RCCL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"  # RCCL: the kernel name says no kind
GEMM = "ampere_sgemm_128x64_nn"
AG_US, RS_US, COMP_US, STEP_US = 400.0, 300.0, 1000.0, 10_000.0


def _collective(s: Synth, label: str, op: str, kernel: str, start: float, dur: float) -> None:
    """An FSDP2 annotation launching one collective kernel that runs [start, start + dur)."""
    s.op(label, start - 8, 20, cat="user_annotation")
    ext = s.op(op, start - 6, 10)
    s.gpu(kernel, start, dur, stream=20, ext=ext, launch_ts=start - 4)


def fsdp_job(*, overlapped: bool, root_only: bool = False, rccl: bool = False, steps: int = 3, blocks: int = 3,
             rank: int | None = None) -> Synth:
    """Forward: each unit's all-gather then its GEMM; backward: its GEMM then its reduce-scatter.
    Overlapped: unit i+1's all-gather runs during unit i's GEMM (and unit i's reduce-scatter during
    unit i-1's backward GEMM), so only the first and the last are exposed; else all are."""
    s = Synth(rank=rank, world=2 if rank is not None else None)
    units = [""] if root_only else [f"layers.{i}" for i in range(blocks)]
    ag = RCCL if rccl else NCCL_AG
    rs = RCCL if rccl else NCCL_RS
    size = blocks if root_only else 1  # the root unit holds every block's parameters
    ag_us, rs_us, comp_us = AG_US * size, RS_US * size, COMP_US * size
    for k in range(steps):
        t0 = 1_000_000 + k * STEP_US
        s.step(k + 1, t0, STEP_US)
        t = t0 + 100
        for i, u in enumerate(units):  # forward
            label = f"FSDP::all_gather ({u})" if u else "FSDP::all_gather"
            if not overlapped or i == 0:
                _collective(s, label, "nccl:_all_gather_base", ag, t, ag_us)
                t += ag_us
            ext = s.op("aten::mm", t - 6, 10)
            s.gpu(GEMM, t, comp_us, ext=ext)
            if overlapped and i + 1 < len(units):  # the next unit's all-gather beside this GEMM
                _collective(s, f"FSDP::all_gather ({units[i + 1]})", "nccl:_all_gather_base", ag, t + 10, ag_us)
            t += comp_us
        for i, u in reversed(list(enumerate(units))):  # backward
            ext = s.op("aten::mm", t - 6, 10)
            s.gpu(GEMM, t, comp_us, ext=ext)
            label = f"FSDP::post_backward_reduce ({u})" if u else "FSDP::post_backward_reduce"
            if overlapped and i > 0:  # this unit's reduce-scatter beside the previous unit's GEMM
                _collective(s, label, "nccl:_reduce_scatter_base", rs, t + comp_us + 10, rs_us)
                t += comp_us
            else:
                t += comp_us
                _collective(s, label, "nccl:_reduce_scatter_base", rs, t, rs_us)
                t += rs_us
    return s


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


def test_names_are_classified_by_kind_and_unit():
    assert kernel_kind(NCCL_AG) == "all_gather" and kernel_kind(NCCL_RS) == "reduce_scatter"
    assert kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all_reduce"
    assert kernel_kind(RCCL) is None  # told by the launching operator instead
    assert op_kind("nccl:_all_gather_base") == "all_gather" and op_kind("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert op_kind("c10d::allreduce_") == "all_reduce" and op_kind("aten::mm") is None
    assert fsdp_unit("FSDP::all_gather (layers.3)") == ("all_gather", "layers.3")
    assert fsdp_unit("FSDP::post_backward_reduce") == ("reduce_scatter", "")
    assert fsdp_unit("FSDP::pre_forward (layers.3)") is None


def test_an_exposed_fsdp2_job_is_sized_per_kind_and_unit_and_gets_the_all_gather_fix(tmp_path):
    r = analyze_file(fsdp_job(overlapped=False).write(tmp_path / "exposed.json"))
    c = r.collectives
    assert c.source == "gpu kernels" and c.sharding == "fsdp2" and not c.root_only
    ag, rs = c.kind("all_gather"), c.kind("reduce_scatter")
    assert ag.calls_per_step == 3 and rs.calls_per_step == 3
    assert ag.exposed_per_step == pytest.approx(3 * AG_US * 1e-6) == pytest.approx(ag.seconds_per_step)
    assert rs.exposed_per_step == pytest.approx(3 * RS_US * 1e-6)
    assert c.fsdp_exposed_share == pytest.approx(3 * (AG_US + RS_US) / STEP_US)
    assert c.fsdp_exposed_per_step == pytest.approx((3 * (AG_US + RS_US) * 1e-6,) * 3)
    assert {u.unit for u in c.units} == {"layers.0", "layers.1", "layers.2"}
    assert all(u.all_gather_s == pytest.approx(AG_US * 1e-6) for u in c.units)
    (f,) = [f for f in _findings(r) if f.code == "PIT705"]
    assert "all-gathers are exposed" in f.title and "set_modules_to_forward_prefetch" in f.fix
    assert f.impact_share == pytest.approx(0.21) and f.severity == "high"
    assert not [f for f in _findings(r) if f.code == "PIT702"]  # FSDP's collectives are PIT705's


def _findings(r):
    from pitstop.trace.check import JobView
    from pitstop.trace.job import run_checks

    return run_checks((r,), JobView((r,), (), None), Thresholds())


def test_an_overlapped_job_exposes_only_its_first_all_gather_and_last_reduce_scatter(tmp_path):
    r = analyze_file(fsdp_job(overlapped=True).write(tmp_path / "overlapped.json"))
    c = r.collectives
    ag, rs = c.kind("all_gather"), c.kind("reduce_scatter")
    assert ag.calls_per_step == 3 and ag.seconds_per_step == pytest.approx(3 * AG_US * 1e-6)
    assert ag.exposed_per_step == pytest.approx(AG_US * 1e-6) and rs.exposed_per_step == pytest.approx(RS_US * 1e-6)
    assert c.fsdp_exposed_share == pytest.approx((AG_US + RS_US) / STEP_US)
    assert c.fsdp_exposed_share < Thresholds().exposed_communication
    assert not [f for f in _findings(r) if f.code in ("PIT705", "PIT702")]


def test_root_only_and_rccl_kernels_take_their_kind_from_the_host_operator(tmp_path):
    one = fsdp_job(overlapped=False, root_only=True, rccl=True, rank=0)
    two = fsdp_job(overlapped=False, root_only=True, rccl=True, rank=1)
    folder = tmp_path / "job"
    folder.mkdir()
    one.write(folder / "rank0.json")
    two.write(folder / "rank1.json")
    report = trace([folder], workers=1)
    c = report.ranks[0].collectives
    assert c.root_only and [u.unit for u in c.units] == [""]
    assert c.kind("all_gather").calls_per_step == 1 and c.kind("reduce_scatter").calls_per_step == 1
    assert c.kind("other") is None
    assert c.fsdp_exposed_share == pytest.approx(3 * (AG_US + RS_US) / STEP_US)
    fs = _codes(report, "PIT705")
    assert fs and all("through the root unit" in f.title and "fully_shard(block)" in f.fix for f in fs)
    back = type(report).from_dict(report.to_dict())
    assert back.ranks[0].collectives == c
