"""What finding the latest checkpoint costs, against loading it.

    python benchmarks/engine_checkpoint_discovery.py [--mib 256] [--tensors 200] [--repeats 7]

Writes one checkpoint of about ``--mib`` MiB split over ``--tensors`` tensors with
``pitstop.save_checkpoint``, then times, interleaved (each repeat runs both in a shuffled
order): ``latest_checkpoint`` (reads the zip directory and each member's header) and
``load_checkpoint`` (CRC pass over every byte, then a weights-only ``torch.load``), which is
what ``latest_checkpoint`` did before. The file sits in the page cache for both, so disk reads
are not part of either number; on a cold cache the full load also reads the whole file.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

from pitstop.engine.checkpoint import checkpoint_path, latest_checkpoint, load_checkpoint, save_checkpoint
from pitstop.stats import ratio_interval, summarize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    per = args.mib * 2**20 // 4 // args.tensors
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint({f"t{i}": torch.zeros(per) for i in range(args.tensors)}, checkpoint_path(tmp, 1))
        size = Path(path).stat().st_size
        contenders = {"latest_checkpoint": lambda: latest_checkpoint(tmp),
                      "load_checkpoint": lambda: load_checkpoint(path)}
        for fn in contenders.values():  # warm-up: page cache, imports
            fn()
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.repeats):
            order = list(contenders)
            random.shuffle(order)
            for name in order:
                start = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - start)
    print(f"checkpoint: {size / 2**20:.0f} MiB, {args.tensors} tensors, {args.repeats} interleaved repeats")
    for name, xs in times.items():
        s = summarize(xs)
        print(f"  {name:18s} median {s.median * 1e3:9.2f} ms  [p10 {s.p10 * 1e3:.2f}, p90 {s.p90 * 1e3:.2f}]")
    r = ratio_interval(times["load_checkpoint"], times["latest_checkpoint"])  # median(load) / median(latest)
    print(f"  load_checkpoint / latest_checkpoint: {r.ratio:.0f}x [90% CI {r.low:.0f}-{r.high:.0f}]")


if __name__ == "__main__":
    main()
