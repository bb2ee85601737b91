"""What the out-of-memory diagnosis adds to every doctor run: its recorders' cost per step.

In one process, the bundled examples' training step (``benchmarks/doctor_overhead.py``'s
workloads) runs in alternating blocks (ABBA) under the doctor's full instrumentation, once as
it ships (with :class:`pitstop.doctor.record.oom.watch.MemWatch`: the module stack from global
forward hooks, every saved tensor noted with its module, the blocks timed) and once with that
recorder removed right after install. The difference is the watch's cost on an observed step.
Also timed, once per example: the profiled memory step (one step under the tracked allocator,
``StorageLedger``), which the doctor runs in place of its last warmup step, against a plain step.

    python benchmarks/oom_watch_overhead.py [--examples cnn gpt mlp] [--blocks 8] [--block 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from doctor_overhead import _print, _workload


def in_process(name: str, blocks: int, block: int) -> None:
    from pitstop.doctor.record.instrument import Instrumentation

    step = _workload(name)
    for _ in range(3):
        step()
    times = {(m, c): [] for m in ("without", "with") for c in ("wall", "cpu")}
    for b in range(blocks):
        for mode in (("without", "with") if b % 2 == 0 else ("with", "without")):
            inst = Instrumentation(10**9, 0, mode="full", stop=False).install()
            if mode == "without":
                inst.memory.watch.uninstall()
                inst.memory.watch = None
            try:
                for i in range(block + 1):
                    t0, c0 = time.perf_counter(), time.process_time()
                    step()
                    if i:
                        times[(mode, "wall")].append(time.perf_counter() - t0)
                        times[(mode, "cpu")].append(time.process_time() - c0)
            finally:
                inst.uninstall()
    for clock in ("wall", "cpu"):
        _print(name, f"watch {clock}", times[("without", clock)], times[("with", clock)])


def ledger_step(name: str, repeats: int) -> None:
    from pitstop.doctor.record.oom.ledger import StorageLedger

    step = _workload(name)
    for _ in range(3):
        step()
    plain, tracked = [], []
    for r in range(repeats):
        for mode in (("plain", "ledger") if r % 2 == 0 else ("ledger", "plain")):
            c0 = time.process_time()
            if mode == "ledger":
                with StorageLedger():
                    step()
                tracked.append(time.process_time() - c0)
            else:
                step()
                plain.append(time.process_time() - c0)
    _print(name, "ledger cpu", plain, tracked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", default=["cnn", "gpt", "mlp"])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'ex':5} {'how':12} {'base ms':>10} {'with ms':>10} {'overhead':>9}  90% interval      steps")
    for name in args.examples:
        in_process(name, args.blocks, args.block)
        ledger_step(name, 6)


if __name__ == "__main__":
    main()
