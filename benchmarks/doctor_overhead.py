"""Overhead of ``pitstop doctor``'s instrumentation on the bundled examples.

For each example, runs the naive script under the doctor's runner in two modes, interleaved
(light, full, light, full, ...) so that machine noise hits both alike:

- ``light``: only the optimizer step hooks and the loss capture (what ``pitstop tune`` uses;
  the closest thing to an uninstrumented run that still has per-step times);
- ``full``: everything ``pitstop doctor`` installs (module hooks, DataLoader timing, sync
  patches, saved-tensor hooks, memory samples), probes off.

Prints, per example, the median observed step time of each mode and the overhead
``median(full) / median(light) - 1`` with a 90% bootstrap interval. Target: <= 5%.

    python benchmarks/doctor_overhead.py [--repeats 3] [--steps 10] [--examples cnn gpt mlp]
"""

from __future__ import annotations

import argparse

from pitstop.doctor import RunSpec, run_script
from pitstop.stats import quantile, ratio_interval

ARGS = {"cnn": ("--eval-every", "1000"), "gpt": ("--eval-every", "1000"), "mlp": ("--eval-every", "1000")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--examples", nargs="+", default=["cnn", "gpt", "mlp"])
    args = parser.parse_args()
    print(f"{'example':8} {'light ms':>10} {'full ms':>10} {'overhead':>9}  90% interval      steps/mode")
    for name in args.examples:
        times: dict[str, list[float]] = {"light": [], "full": []}
        steps = args.steps * (3 if name == "mlp" else 1)
        for _ in range(args.repeats):
            for mode in ("light", "full"):
                spec = RunSpec(module=f"pitstop.examples.{name}", args=ARGS[name], steps=steps, warmup=args.warmup,
                               mode=mode, probes=False, stdout="devnull")
                result = run_script(spec)
                if result.status != "stopped":
                    raise SystemExit(f"{name} {mode}: {result.status}: {result.message}")
                times[mode] += [s.wall for s in result.observed]
        light, full = quantile(times["light"], 0.5), quantile(times["full"], 0.5)
        ri = ratio_interval(times["full"], times["light"])  # median(full) / median(light)
        print(f"{name:8} {light * 1e3:10.2f} {full * 1e3:10.2f} {100 * (full / light - 1):+8.1f}%  "
              f"[{100 * (ri.low - 1):+.1f}%, {100 * (ri.high - 1):+.1f}%]  {len(times['full'])}")


if __name__ == "__main__":
    main()
