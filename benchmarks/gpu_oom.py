"""On the lent GPU: a training that runs out of memory, what the doctor says, and the batch it predicts, run.

    python benchmarks/gpu_oom.py --out DIR [--device cuda] [--batch-size N] [--limit SIZE]

1. ``benchmarks/gpu_oom_train.py`` (a GPT in fp32 with AdamW, ~1 GB per sample of 1024 tokens)
   at a batch several times what the device holds, under ``pitstop doctor``: it must end as an
   out-of-memory failure, explained (phase, module, what was allocated by category, the CUDA
   allocator's reserve and fragmentation, its history's top allocation sites);
2. at half the largest batch that failure suggests (an upper bound: the step had not reached
   its peak), a run that fits: its profiled step gives the precise "what fits";
3. at the largest batch that profile predicts with the 10% margin: the run must train its
   steps, and its own measured peak (CUDA allocator) is compared with the prediction.

Everything is written under DIR: each run's text report and JSON, and ``summary.md`` (the
numbers for docs/gpu/). ``--limit 64MiB --device cpu`` rehearses the whole path on a CPU with
pitstop's tracked allocator as the "device" and small sizes.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "gpu_oom_train.py"


def doctor(args: tuple[str, ...], out: Path, name: str, timeout: float, budget: int | None) -> tuple:
    from pitstop.doctor.analysis.diagnosis import diagnose
    from pitstop.doctor.run.runner import run_script
    from pitstop.doctor.run.spec import RunSpec
    from pitstop.jsoncodec import dumps
    from pitstop.report.doctor_terminal import render

    t0 = time.perf_counter()
    diag = diagnose(run_script(RunSpec(script=str(TRAIN), args=args, steps=2, warmup=2, probes=False,
                                       timeout=timeout, stdout="devnull", memory_budget=budget)))
    seconds = time.perf_counter() - t0
    buf = io.StringIO()
    render(diag, file=buf)
    (out / f"{name}.txt").write_text(buf.getvalue())
    (out / f"{name}.json").write_text(dumps(diag.to_dict()))
    return diag, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch-size", type=int, default=256, help="the first run's batch (it must fail)")
    p.add_argument("--limit", default=None, help="CPU rehearsal: the tracked allocator's limit, e.g. 64MiB")
    p.add_argument("--small", action="store_true", help="small model (CPU rehearsal)")
    p.add_argument("--timeout", type=float, default=240)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    size = ("--layers", "2", "--width", "64", "--heads", "4", "--seq", "64", "--vocab", "512") if a.small else ()
    base = (*size, "--device", a.device) + (("--limit", a.limit) if a.limit else ())
    lines = ["# Out of memory on the lent device, explained, and the predicted batch run", ""]
    budget = None
    if a.limit:  # the rehearsal's "device" is the tracked allocator: the doctor is asked about its size
        from pitstop.tune.peak import parse_bytes

        budget = parse_bytes(a.limit)
    batch = a.batch_size
    for _ in range(3):  # a device larger than expected: a larger batch until it fails
        diag, secs = doctor(("--batch-size", str(batch), *base), a.out, f"1_oom_batch{batch}", a.timeout, budget)
        if diag.result.oom is not None:
            break
        batch *= 4
    oom = diag.result.oom
    if oom is None:
        lines.append(f"batch {batch // 4} did not run out of memory: {diag.headline}")
        (a.out / "summary.md").write_text("\n".join(lines) + "\n")
        raise SystemExit(1)
    fit = diag.memory_fit
    parts = oom.parts
    lines += [f"1. batch {batch}: {diag.headline} ({secs:.0f} s)", f"   where: {oom.where}",
              f"   capacity {oom.capacity} ({oom.capacity_source}), tried {oom.tried}",
              f"   allocated by category: {json.dumps({k: getattr(parts, k) for k in ('params', 'grads', 'optimizer_state', 'activations', 'temporaries', 'total')}) if parts else 'n/a'}",
              f"   allocator: {oom.allocator}", f"   what fits (from the failure): largest batch {fit.largest_batch_margin if fit else None}"]
    fit2 = fit
    for i in range(3):  # a failure's "what fits" is an upper bound: half of it, until a run fits and is profiled
        probe = max(1, (fit2.largest_batch_margin if fit2 and fit2.largest_batch_margin else batch // 4) // 2)
        diag2, secs2 = doctor(("--batch-size", str(probe), *base), a.out, f"2_profile_batch{probe}", a.timeout, budget)
        fit2 = diag2.memory_fit
        prof = diag2.observations.memory_profile
        lines.append(f"2.{i + 1} batch {probe}: {diag2.headline} ({secs2:.0f} s)" + (
            f"; what fits ({fit2.basis.source}): largest batch {fit2.largest_batch} ({fit2.largest_batch_margin} with the "
            f"{fit2.margin:.0%} margin) under {fit2.limit} ({fit2.limit_source})" if fit2 else ""))
        if diag2.result.oom is None:
            lines.append(f"    profiled peak {prof.peak if prof else None} (CUDA allocator over that step: "
                         f"{prof.allocator_peak if prof else None})")
            break
    target = fit2.largest_batch_margin if fit2 and diag2.result.oom is None else None
    if target:
        diag3, secs3 = doctor(("--batch-size", str(target), *base), a.out, f"3_predicted_batch{target}", a.timeout, budget)
        prof3 = diag3.observations.memory_profile
        predicted = fit2.basis.peak(target) if fit2 else None
        measured = (prof3.allocator_peak or prof3.peak) if prof3 else None
        lines += [f"3. batch {target}: {diag3.outcome}: {diag3.headline} ({secs3:.0f} s); predicted peak {predicted:.0f}, "
                  f"measured {measured}" + (f" ({measured / predicted - 1:+.1%})" if measured and predicted else "")]
    (a.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
