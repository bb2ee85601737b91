"""pitstop tune's stagewise path, checked by hand (issue 28).

    python benchmarks/tune_stagewise.py [--rounds 7] [--steps 6]

The workload is ``tests/fixtures/tune/stagewise_train.py``: an input pipeline bound by I/O
latency (``__getitem__`` sleeps; no DataLoader workers) in front of a device-like compute step
that runs beside it (the step takes ``max(data, compute)``). The tuner gets the real PIT101
workers knob offering 4 workers and a planted knob that halves the compute step
(``tests/fixtures/tune/planted_knobs.py``).

1. ``tune_script`` runs the stagewise search; the path it returns is printed (each stage's
   speed-up over the previous stage with its interval, cumulative over the baseline).
2. **By hand**: each stage's configuration written as the script's own options
   (``--workers 4``, ``--halve``), one intra-op thread as the tuner's runs, the three
   configurations run interleaved for ``--rounds`` rounds, each run's median step time (``--report``); each stage's hand ratio is the median
   over rounds of (previous stage's time / this stage's time) in the same round.
3. Printed: claimed, by hand, claimed / by hand; ``within 15%`` when every stage's claim lies
   within 15% of the hand ratio. The machine (CPU model, cores, load) is printed with the numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "tests" / "fixtures" / "tune"
CONFIGS = {"baseline": [], "num_workers=4": ["--workers", "4"], "num_workers=4 + halve-pace": ["--workers", "4", "--halve"]}


def by_hand(args: list[str], steps: int) -> float:
    out = subprocess.run([sys.executable, "-W", "ignore", str(TUNE / "stagewise_train.py"), "--steps", str(steps + 8),
                          "--report", "6", *args], cwd=TUNE, capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout  # as the tuner's runs (threads=1)
    return float(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("median_step")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=16, help="measured steps of each hand run")
    args = parser.parse_args()
    sys.path.insert(0, str(TUNE))
    import planted_knobs as planted

    from pitstop.machine import cpu_features, machine_load, usable_cores
    from pitstop.stats import median
    from pitstop.tune.api import tune_script

    def machine() -> str:
        load = machine_load()
        return (f"{cpu_features().model or 'unknown CPU'}, {usable_cores()} usable cores, "
                f"load {load[0]:.1f}" if load else "")

    print(f"machine: {machine()}")
    r = tune_script(str(TUNE / "stagewise_train.py"), steps=6, warmup=3, repeats=3, max_pairs=5, timeout=60, threads=1,
                    knobs=[planted.IOWorkersKnob(), planted.HalvePaceKnob()])
    print(f"search: {r.time.total:.0f} s, {r.time.runs} runs")
    for st in r.stages:
        sp = st.speed
        print(f"  stage {st.index}: + {st.trick}: {sp.ratio:.2f}x [{sp.low:.2f}, {sp.high:.2f}] over the previous stage "
              f"({st.clock} time), {st.cumulative:.2f}x cumulative")
    if r.best is not None:
        print(f"  confirmed: {r.best.name}: {r.best.speed.ratio:.2f}x [{r.best.speed.low:.2f}, {r.best.speed.high:.2f}]")
    names = ["baseline"] + [" + ".join(s.label for s in st.settings) for st in r.stages]
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(args.rounds):
        order = names if i % 2 == 0 else names[::-1]
        for n in order:
            times[n].append(by_hand(CONFIGS[n], args.steps))
    print(f"by hand ({args.rounds} rounds, median step time): "
          + ", ".join(f"{n}: {median(t) * 1e3:.1f} ms" for n, t in times.items()))
    ok = len(r.stages) == 2
    for k, st in enumerate(r.stages, start=1):
        prev, cur = times[names[k - 1]], times[names[k]]
        hand = median([a / b for a, b in zip(prev, cur)])
        rel = st.speed.ratio / hand
        ok &= abs(rel - 1) <= 0.15
        print(f"  stage {k} ({st.trick}): claimed {st.speed.ratio:.2f}x, by hand {hand:.2f}x, claimed / by hand "
              f"{rel:.2f}")
    print(f"machine at the end: {machine()}")
    print("within 15%: " + ("yes" if ok else "NO") + ("" if len(r.stages) == 2 else f" (path: {names[1:]})"))
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
