"""What the doctor predicts a memory fix saves, against what it saves, on the bundled CNN and GPT.

For each model (``tests/fixtures/doctor/memory_loop.py``: the clean CNN at batch 32, the GPT at
8 x 64 tokens, AdamW, a plain loop) one ``pitstop doctor`` run (``--memory-budget`` when given)
reports ``memory_fit``; then the same steps run here under the tracked allocator
(``StorageLedger``), plain and with each fix the report ranks, and the peaks are compared.
Bytes are tensor storage bytes (what a CUDA allocator would count, without its rounding).

    python benchmarks/memory_fit_check.py [--budget 40MiB]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "tests" / "fixtures" / "doctor" / "memory_loop.py"
SIZES = {"gpt": 8, "cnn": 32}


def peak(loop, name, size, *, optimizer="adamw", **fix) -> int:
    from pitstop.doctor.record.oom.ledger import StorageLedger

    model, opt = loop.build(name, optimizer)
    loop.step(model, opt, *loop.batch(name, size, seed=0), **fix)
    x, y = loop.batch(name, size, seed=1)
    ledger = StorageLedger()
    ledger.track(model, opt, x, y)
    with ledger:
        loop.step(model, opt, x, y, **fix)
    return ledger.peak


def variant(fix, size):
    e = fix.estimate
    if e.code == "PIT401":
        return {"recompute": True}
    if e.code == "PIT301":
        return {"autocast": torch.bfloat16}
    if e.code == "PIT406":
        return {"accumulate": round(size / e.batch)}
    if e.code == "PIT402" and e.title.startswith("SGD"):
        return {"optimizer": "sgd"}
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default=None)
    args = parser.parse_args()
    from pitstop.doctor.analysis.diagnosis import diagnose
    from pitstop.doctor.run.runner import run_script
    from pitstop.doctor.run.spec import RunSpec
    from pitstop.tune.peak import parse_bytes

    sys.path.insert(0, str(LOOP.parent))
    import memory_loop as loop

    budget = parse_bytes(args.budget) if args.budget else None
    for name, size in SIZES.items():
        diag = diagnose(run_script(RunSpec(script=str(LOOP), args=(name, str(size)), steps=2, warmup=2, probes=False,
                                           stdout="devnull", memory_budget=budget)))
        fit = diag.memory_fit
        base = peak(loop, name, size)
        print(f"{name} batch {size}: predicted peak {fit.peak / 2**20:.2f} MiB, measured {base / 2**20:.2f} MiB; "
              f"largest batch under {fit.limit / 2**20:.0f} MiB ({fit.limit_source}): {fit.largest_batch} "
              f"({fit.largest_batch_margin} with the {fit.margin:.0%} margin)")
        for fix in fit.fixes:
            v = variant(fix, size)
            measured = base - peak(loop, name, size, **v) if v is not None else None
            m = f"{measured / 2**20:6.2f} MiB  {100 * (fix.saves / measured - 1):+5.1f}%" if measured else "  (not measurable here)"
            print(f"  {fix.estimate.code} {fix.estimate.title:<62} predicted {fix.saves / 2**20:6.2f} MiB  measured {m}")


if __name__ == "__main__":
    main()
