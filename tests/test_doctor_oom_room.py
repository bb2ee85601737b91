"""The CUDA allocator's room in the memory fit, on a recorded H200 failure.

On an H200 the fit predicted that batch 125 of ``benchmarks/gpu_oom_train.py`` fits with the
10% margin (peak 126 of 139.8 GiB); it ran out of memory asking for a 15.26 GiB piece while
14.25 GiB sat free in split blocks. The fit now keeps room for one more of the step's largest
allocation on CUDA (``FitBasis.room``); on a CPU it keeps none. The ledger records that largest
allocation (an operator's, not a parameter tracked before the step).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest
import torch

from conftest import FIXTURES
from pitstop.doctor.analysis.fits import DEFAULT_MARGIN, assess, basis_of
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.record.oom.ledger import StorageLedger

RECORD = FIXTURES / "gpu_h200" / "oom_h200.json.gz"


@pytest.fixture(scope="module")
def recorded():
    with gzip.open(RECORD, "rt") as fh:
        d = json.load(fh)
    return Observations.from_dict(d["observations"]), d["failure"]


def _with_largest(obs, nbytes, category="temporary", device=None):
    mp = replace(obs.memory_profile, largest=nbytes, largest_category=category,
                 device=device or obs.memory_profile.device)
    return replace(obs, memory_profile=mp)


def test_the_recorded_profile_alone_predicts_the_batch_that_failed(recorded):
    """The record as it was: no largest allocation, so no room; the fit says the failed batch fits."""
    obs, failure = recorded
    fit = assess(obs, None)
    assert fit.basis.room == (0.0, 0.0) and fit.basis.device == "cuda"
    assert fit.largest_batch_margin == failure["batch_size"] == 125
    assert failure["error"] == "OutOfMemoryError" and failure["phase"] == "backward"


def test_room_for_the_largest_allocation_keeps_the_failed_batch_out(recorded):
    obs, failure = recorded
    b0 = obs.memory_profile.micro_batch
    # the largest allocation at batch 100, from the failure's own request at batch 125 (it grows
    # with the batch): the logits' gradient, the same bytes the profile saw saved outside the modules
    largest = failure["tried"] * b0 / failure["batch_size"]
    outside = next(m.bytes for m in obs.memory_profile.at_peak.by_module if m.module == "(outside modules)")
    assert largest == pytest.approx(outside, rel=0.001)
    fit = assess(_with_largest(obs, int(largest)), None)
    basis = fit.basis
    assert basis.room == (0.0, pytest.approx(largest / b0))
    for b in (1, 50, 125):
        assert basis.need(b) - basis.peak(b) == pytest.approx(b * largest / b0)
    # the batch that failed no longer fits, with or without the margin; the one predicted does
    assert basis.need(125) * (1 + DEFAULT_MARGIN) > fit.limit
    assert fit.largest_batch_margin < 125 and fit.largest_batch < 125
    assert basis.need(fit.largest_batch_margin) * (1 + DEFAULT_MARGIN) <= fit.limit
    assert basis.need(fit.largest_batch_margin + 1) * (1 + DEFAULT_MARGIN) > fit.limit
    assert any("room kept for the CUDA allocator" in n and "expandable_segments" in n for n in fit.notes)


def test_a_fixed_largest_allocation_is_room_at_every_batch(recorded):
    obs, _ = recorded
    fit = assess(_with_largest(obs, 3 * 2**30, category="grad"), None)
    assert fit.basis.room == (float(3 * 2**30), 0.0)
    assert fit.basis.need(7) - fit.basis.peak(7) == 3 * 2**30


def test_no_room_on_a_cpu(recorded):
    """The same profile on a CPU device: no caching allocator to fragment, the fit is the peak's."""
    obs, _ = recorded
    on_cuda = assess(obs, None)
    cpu = _with_largest(obs, 13 * 10**9, device="cpu")
    basis = basis_of(cpu.memory_profile, None)
    assert basis.room == (0.0, 0.0)
    assert assess(cpu, None).largest_batch_margin == on_cuda.largest_batch_margin


def test_the_ledger_records_the_largest_storage_an_operator_made():
    model = torch.nn.Linear(64, 64)  # 16 KiB of weight, tracked before: not an allocation of the step
    x = torch.randn(8, 64)
    with StorageLedger() as ledger:
        ledger.track(model)
        big = torch.zeros(256, 256)  # 256 KiB: the largest made in the step
        y = model(x)
        small = y * 2
    assert ledger.largest is not None and ledger.largest.nbytes == big.untyped_storage().nbytes()
    assert ledger.largest.category == "temporary"
    assert small.numel() == 8 * 64
