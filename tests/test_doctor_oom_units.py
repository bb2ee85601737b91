"""The pieces of the out-of-memory diagnosis, on synthetic inputs (no doctor run).

Messages (CUDA's, the CPU allocator's, the tracked allocator's), the phase read from a
traceback, the CUDA allocator's snapshot, the parent's reading of a killed child's memory
trail, the tracked allocator's accounting and limit, the "what fits" arithmetic, and the
CUDA-only paths (skipped on CPU, with the reason)."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from torch import nn

from pitstop.doctor.analysis.fits import FitBasis, FixEstimate, largest_batch
from pitstop.doctor.analysis.oom_records import MemoryParts, looks_like_oom, parse_oom_message
from pitstop.doctor.record.oom.capture import is_oom, phase_of, snapshot_facts
from pitstop.doctor.record.oom.ledger import StorageLedger
from pitstop.doctor.run.oomkill import RSS_SUFFIX, KillWatch, grew

CUDA_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
                "1.25 GiB is free. Including non-PyTorch memory, this process has 77.84 GiB memory in use. Of the "
                "allocated memory 75.50 GiB is allocated by PyTorch, and 1.80 GiB is reserved by PyTorch but "
                "unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def test_cuda_message_numbers():
    m = parse_oom_message(CUDA_MESSAGE)
    assert m.tried == 2 * 2**30 and m.capacity == int(79.10 * 2**30) and m.free == int(1.25 * 2**30)
    assert m.allocated == int(75.50 * 2**30) and m.reserved_unallocated == int(1.80 * 2**30) and m.limit is None


def test_cpu_allocator_and_tracked_allocator_messages():
    cpu = "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"
    assert looks_like_oom("RuntimeError", cpu) and parse_oom_message(cpu).tried == 8 * 2**30
    assert not looks_like_oom("RuntimeError", "mat1 and mat2 shapes cannot be multiplied")
    assert looks_like_oom("OutOfMemoryError", "") and looks_like_oom("MemoryError", "")
    with pytest.raises(torch.OutOfMemoryError) as err:
        ledger = StorageLedger(limit=1000)
        with ledger:
            torch.ones(1000)
    m = parse_oom_message(str(err.value))
    assert is_oom(err.value) and m.tried == 4000 and m.limit == 1000 and m.allocated == 0


class _Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 MiB.")


class _Net(nn.Module):
    def __init__(self, fail_forward: bool):
        super().__init__()
        self.fc, self.fail_forward = nn.Linear(4, 4), fail_forward

    def forward(self, x):
        if self.fail_forward:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 MiB.")
        return _Boom.apply(self.fc(x))


def _frames(exc):
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


@pytest.mark.parametrize("fail_forward,phase", [(True, "forward"), (False, "backward")])
def test_phase_and_module_from_the_traceback(fail_forward, phase):
    net = _Net(fail_forward)
    with pytest.raises(torch.OutOfMemoryError) as err:
        net(torch.randn(2, 4)).sum().backward()
    got, module = phase_of(_frames(err.value))
    assert got == phase
    assert (module is net) if fail_forward else (module is None)  # backward: the saved-tensor hook names it


def test_optimizer_phase_from_the_traceback():
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.register_step_pre_hook(lambda *a: (_ for _ in ()).throw(torch.OutOfMemoryError("out of memory")))
    with pytest.raises(torch.OutOfMemoryError) as err:
        opt.step()
    assert phase_of(_frames(err.value))[0] == "optimizer"


def test_allocator_snapshot_largest_free_block_and_sites():
    snap = {"segments": [
        {"blocks": [{"state": "active_allocated", "size": 300, "frames": [
            {"filename": torch.__file__, "line": 1}, {"filename": "/home/u/train.py", "line": 42}]},
            {"state": "inactive", "size": 120}, {"state": "active_allocated", "size": 100, "frames": [
                {"filename": "/home/u/model.py", "line": 7}]}]},
        {"blocks": [{"state": "inactive", "size": 500}, {"state": "active_allocated", "size": 50, "frames": [
            {"filename": "/home/u/train.py", "line": 42}]}]}]}
    largest, sites = snapshot_facts(snap)
    assert largest == 500
    assert [(s.module, s.bytes) for s in sites] == [("train.py:42", 350), ("model.py:7", 100)]


def _trail(tmp_path, rss: list[int]) -> str:
    result = tmp_path / "result.json"
    rows = [[100.0 + 0.1 * i, r, 3, "forward"] for i, r in enumerate(rss)]
    (tmp_path / ("result.json" + RSS_SUFFIX)).write_text(json.dumps({"samples": rows, "capacity": 8 * 2**30}))
    return str(result)


def test_a_kill_while_memory_grows_is_a_likely_oom(tmp_path):
    path = _trail(tmp_path, [2**30 + i * 100 * 2**20 for i in range(20)])
    rec = KillWatch().record(path, -signal.SIGKILL)
    assert rec is not None and rec.kind == "killed" and rec.script_exit == 137 and rec.step == 3
    assert "likely out of memory" in rec.message and "grew from" in rec.evidence[0]
    assert rec.rss[-1].seconds == 0 and rec.rss[0].rss < rec.rss[-1].rss


def test_a_kill_with_flat_memory_or_another_status_is_not_an_oom(tmp_path):
    flat = _trail(tmp_path, [2**30] * 20)
    watch = KillWatch()
    watch.kills = None  # the cgroup counter is not what this test is about
    assert watch.record(flat, -signal.SIGKILL) is None
    assert not grew([]) and KillWatch().record(_trail(tmp_path, [2**30 * i for i in range(1, 5)]), 1) is None


def test_tracked_allocator_peak_by_category():
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    ledger = StorageLedger()
    ledger.track(model, opt, x)
    with ledger, torch.autograd.graph.saved_tensors_hooks(lambda t: (ledger.saved(t, "m"), t)[1], lambda t: t):
        model(x).square().mean().backward()
        opt.step()
    ledger.retag([opt])
    parts = ledger.parts()
    params = sum(p.numel() * 4 for p in model.parameters())
    assert parts.attributed == parts.total == ledger.peak
    assert parts.params == params and parts.grads == params
    assert 2 * params <= parts.optimizer_state <= 2 * params + 4 * 4


def test_largest_batch_is_the_last_batch_whose_predicted_peak_fits():
    moments = [MemoryParts(params=1000, optimizer_state=2000, activations=800, temporaries=200, phase="backward"),
               MemoryParts(params=1000, grads=1000, optimizer_state=2000, activations=80, temporaries=20,
                           phase="backward"),
               MemoryParts(params=1000, grads=1000, optimizer_state=2000, temporaries=1500, phase="optimizer")]
    basis = FitBasis(source="profile", device="cpu", batch=10, moments=moments)
    for limit in (5500, 6000, 9999, 20000):
        b = largest_batch(basis, limit)
        assert basis.peak(b) <= limit < basis.peak(b + 1), (limit, b)
    assert largest_batch(basis, 5500) == 25  # 3000 + 100 x 25; the optimizer step's 5500 is the floor
    assert largest_batch(basis, 5499) is None  # under the optimizer step: no batch fits
    fix = FixEstimate(code="PIT999", title="t", activation_share=0.5, grads_held=True)
    assert basis.peak(10, fix) == max(1000 + 1000 + 2000 + 400 + 200, 4000 + 40 + 20, 5500)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA allocator's counters and history need a CUDA device")
def test_cuda_allocator_facts_read_on_a_gpu():
    from pitstop.doctor.record.oom.capture import allocator_facts

    x = torch.empty(2**20, device="cuda")
    facts = allocator_facts("not recorded")
    assert facts.allocated >= x.numel() * 4 and facts.reserved >= facts.allocated


def _observations(*, world_size=None, amsgrad=False):
    from pitstop.doctor.analysis.observations import Observations
    from pitstop.doctor.analysis.oom_records import MemoryProfile
    from pitstop.doctor.analysis.records import OptimizerRecord, Settings

    mib = 2**20
    peak = MemoryParts(params=100 * mib, grads=0, optimizer_state=(300 if amsgrad else 200) * mib,
                       activations=400 * mib, temporaries=50 * mib, phase="backward", total=750 * mib)
    ratio = 3.0 if amsgrad else 2.0
    opt = OptimizerRecord(cls="AdamW", param_bytes=100 * mib, state_bytes=int(ratio * 100 * mib), state_ratio=ratio,
                          options={"amsgrad": amsgrad})
    prof = MemoryProfile(step=1, batch=16, peak=peak.attributed, at_peak=peak, moments=[peak], saved=400 * mib)
    return Observations(optimizers=[opt], settings=Settings(world_size=world_size), memory_profile=prof,
                        capacity=16 * 2**30)


def test_optimizer_state_and_sharding_fixes_are_computed_from_the_sizes():
    from pitstop.doctor.analysis.fits import assess

    fit = assess(_observations(world_size=4, amsgrad=True), None, budget=700 * 2**20)
    by = {f.estimate.title: f for f in fit.fixes}
    assert fit.peak == 850 * 2**20 and fit.fits is False and fit.shown
    assert by["AdamW without amsgrad"].saves == 100 * 2**20  # 3x -> 2x of 100 MiB of parameters
    assert by["SGD with momentum instead of AdamW"].saves == 200 * 2**20  # 3x -> 1x
    assert by["FSDP2 over the 4 ranks"].saves == (100 + 300) * 2**20 * 3 // 4  # params + state, 3/4 of them
    assert "PIT706" not in {f.estimate.code for f in assess(_observations(), None, budget=700 * 2**20).fixes}


def test_expandable_segments_only_when_fragmentation_left_no_free_block_large_enough():
    from dataclasses import replace

    from pitstop.doctor.analysis.fits import assess
    from pitstop.doctor.analysis.oom_records import AllocatorFacts, OomRecord

    mib = 2**20
    fragmented = AllocatorFacts(allocated=700 * mib, reserved=760 * mib, inactive_split=50 * mib, largest_free=8 * mib)
    oom = OomRecord(kind="raised", error="OutOfMemoryError", device="cuda", tried=20 * mib, capacity=800 * mib,
                    capacity_source="the CUDA error message", allocator=fragmented)
    codes = {f.estimate.code: f for f in assess(_observations(), oom).fixes}
    assert codes["PIT405"].saves == 50 * mib and codes["PIT405"].estimate.time_cost == 0.0
    roomy = replace(oom, allocator=replace(fragmented, largest_free=40 * mib))  # a free block was large enough
    assert "PIT405" not in {f.estimate.code for f in assess(_observations(), roomy).fixes}
