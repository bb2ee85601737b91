"""The doctor's bf16 probe on the bundled CNN, quiet and with two busy processes competing.

    python benchmarks/probe_under_load.py [--runs 4] [--busy 2]

Runs ``pitstop doctor`` (full mode, probes on) ``--runs`` times as the machine is, then
``--runs`` times with ``--busy`` pure-Python spin processes started and stopped here. Prints
each run's PIT301 precision probe (speed-up, interval, the clock it was decided on, whether it
timed single-threaded because threads waited for cores) and whether PIT301 was recommended:
the recommendation should be the same in every run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from pitstop.doctor import diagnose, run_script
from pitstop.doctor.run.spec import RunSpec

SPIN = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end:\n    pass\n"


def one() -> str:
    result = run_script(RunSpec(module="pitstop.examples.cnn", steps=5, warmup=2, mode="full", probes=True,
                                stdout="devnull"))
    p = result.observations.probe("precision") if result.observations is not None else None
    codes = {f.code for f in diagnose(result).findings}
    if p is None or p.speedup is None:
        return f"probe: {p}; PIT301 recommended: {'PIT301' in codes}"
    single = " single-threaded" if p.extra.get("single_threaded") else ""
    return (f"bf16 {p.speedup:.2f}x [{p.interval[0]:.2f}, {p.interval[1]:.2f}] on {p.measure} time"
            f"{single}, {p.runs} rounds; PIT301 recommended: {'PIT301' in codes}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--busy", type=int, default=2)
    args = ap.parse_args()
    print(f"as the machine is (load average {os.getloadavg()[0]:.1f}):")
    for _ in range(args.runs):
        print("  " + one(), flush=True)
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy)]
    try:
        print(f"with {args.busy} busy processes:")
        for _ in range(args.runs):
            print("  " + one(), flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
