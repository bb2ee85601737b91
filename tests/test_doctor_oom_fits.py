"""What fits, checked against the memory the steps really take.

The doctor's predictions (``memory_fit`` of a run of ``tests/fixtures/doctor/memory_loop.py``,
the bundled CNN and GPT in a plain loop, forked from the warm worker) are compared with the same
steps run here under pitstop's tracked allocator (``StorageLedger``: every tensor storage
alive, with a limit it enforces the way a device of that size would):

- ``--memory-budget`` on a model that fits: the largest batch predicted fits under that
  budget, and the next size up does not (the tracked allocator raises);
- each memory fix the report ranks saves, at the run's batch, what it predicted within 15%:
  checkpointing the blocks (PIT401), bf16 autocast (PIT301), accumulation (PIT406), SGD with
  momentum instead of AdamW (PIT402). The 8-bit optimizer needs bitsandbytes on CUDA and is
  not measured here.
"""

from __future__ import annotations

import sys

import pytest
import torch

from conftest import FIXTURES

pytestmark = pytest.mark.slow

LOOP = FIXTURES / "doctor" / "memory_loop.py"
BUDGET = 40 * 2**20  # the GPT at batch 8 takes ~23 MiB at its peak: a budget it fits in, with room to grow
SIZES = {"gpt": 8, "cnn": 32}


@pytest.fixture(scope="module")
def loop():
    sys.path.insert(0, str(LOOP.parent))
    try:
        import memory_loop
    finally:
        sys.path.remove(str(LOOP.parent))
    return memory_loop


@pytest.fixture(scope="module")
def reports(warm_doctor):
    """One doctor run per model; the GPT's with the budget."""
    return {name: warm_doctor.report(LOOP, name, str(size), steps=2, warmup=2, probes=False, timeout=240,
                                     memory_budget=BUDGET if name == "gpt" else None)
            for name, size in SIZES.items()}


def peak(loop, name, size, *, optimizer="adamw", limit=None, **fix) -> int:
    """The tracked peak of the second step (the optimizer's state made by the first), as the
    doctor's profiled step measures it; with ``limit``, enforced (raises torch.OutOfMemoryError)."""
    from pitstop.doctor.record.oom.ledger import StorageLedger

    model, opt = loop.build(name, optimizer)
    loop.step(model, opt, *loop.batch(name, size, seed=0), **fix)
    x, y = loop.batch(name, size, seed=1)
    ledger = StorageLedger(limit=limit)
    ledger.track(model, opt, x, y)
    with ledger:
        loop.step(model, opt, x, y, **fix)
    return ledger.peak


def test_memory_budget_largest_batch_fits_and_the_next_size_up_does_not(reports, loop):
    fit = reports["gpt"].data["memory_fit"]
    assert fit["shown"] and fit["limit"] == BUDGET and fit["limit_source"] == "--memory-budget" and fit["fits"]
    largest = fit["largest_batch"]
    assert largest > SIZES["gpt"], fit  # it fits today, with room for a larger batch
    assert fit["largest_batch_margin"] < largest  # the 10% margin costs samples
    peak(loop, "gpt", largest, limit=BUDGET)  # fits: no error
    with pytest.raises(torch.OutOfMemoryError):
        peak(loop, "gpt", largest + 1, limit=BUDGET)


def _variant(fix: dict, size: int) -> dict:
    code, title = fix["estimate"]["code"], fix["estimate"]["title"]
    if code == "PIT401":
        return {"recompute": True}
    if code == "PIT301":
        return {"autocast": torch.bfloat16}
    if code == "PIT406":
        return {"accumulate": round(size / fix["estimate"]["batch"])}
    if code == "PIT402" and title.startswith("SGD with momentum"):
        return {"optimizer": "sgd"}
    return {}  # not measurable here (8-bit state: bitsandbytes on CUDA)


@pytest.mark.parametrize("name,expected", [("gpt", {"PIT401", "PIT301", "PIT406", "PIT402"}),
                                           ("cnn", {"PIT301", "PIT406", "PIT402"})])
def test_each_fix_saves_what_it_predicted_within_15_percent(reports, loop, name, expected):
    size = SIZES[name]
    data = reports[name].data
    base = peak(loop, name, size)
    assert data["memory_fit"]["peak"] == base  # the profiled step is this step
    measured = {}
    for fix in data["memory_fit"]["fixes"]:
        variant = _variant(fix, size)
        if not variant:
            continue
        saved = base - peak(loop, name, size, **variant)
        code = fix["estimate"]["code"]
        measured[code] = saved
        assert saved > 0 and abs(fix["saves"] - saved) <= 0.15 * saved, (code, fix["saves"], saved)
    assert set(measured) == expected, measured  # the CNN has no repeated blocks: no PIT401
