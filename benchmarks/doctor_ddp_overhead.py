"""Per-rank overhead of ``pitstop doctor --nproc-per-node N`` next to the single-process doctor's.

A 2-rank gloo DDP job (launched here with ``torch.distributed.run``, as the doctor does)
trains an MLP and runs its step in blocks of three arms, rotated block after block so that
no arm is favoured by the order on a noisy shared machine:

- ``plain``: DDP as the user runs it (DDP's built-in all-reduce);
- ``doctor``: the single-process doctor's full instrumentation (what one rank gets from
  ``pitstop doctor`` without ``--nproc-per-node``);
- ``doctor+dist``: the same plus the distributed recorder of ``--nproc-per-node`` (timed
  collectives, the timing comm hook on a second, identical DDP model, batch fingerprints);
- ``hook only``: that second model with the doctor's comm hook registered but no recorder
  installed (the hook's own effect on DDP's reduction, apart from the recorders').

The first step of each block is dropped (install/uninstall and the graph census land
there). Every rank prints, for wall and CPU time, the median step of each arm and the ratios
``doctor/plain`` and ``doctor+dist/plain`` with 90% bootstrap intervals: the claim is that
the second is no larger than the first (within the intervals).

    python benchmarks/doctor_ddp_overhead.py [--blocks 9] [--block 6] [--width 256]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ARMS = ("plain", "doctor", "doctor+dist", "hook only")


def _rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from pitstop.doctor.record.instrument import Instrumentation
    from pitstop.stats import quantile, ratio_interval

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    def mlp() -> nn.Module:
        torch.manual_seed(0)
        layers = []
        for _ in range(6):
            layers += [nn.Linear(args.width, args.width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(args.width, 10))

    data = TensorDataset(torch.randn(4096, args.width), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    models = {"plain": DDP(mlp()), "dist": DDP(mlp())}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    state = {"it": iter(loader)}

    def step(key: str) -> None:
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        loss = nn.functional.cross_entropy(models[key](x), y)
        opts[key].zero_grad()
        loss.backward()
        opts[key].step()
        f"{loss.item():.4f}"

    for key in models:
        for _ in range(3):
            step(key)
    times = {(arm, clock): [] for arm in ARMS for clock in ("wall", "cpu")}
    for b in range(args.blocks):
        order = ARMS[b % len(ARMS):] + ARMS[:b % len(ARMS)]
        for arm in order:
            inst = None
            if arm in ("doctor", "doctor+dist"):
                inst = Instrumentation(10**9, 0, mode="full", stop=False, distributed=arm == "doctor+dist").install()
            try:
                for i in range(args.block + 1):
                    t0, c0 = time.perf_counter(), time.process_time()
                    step("dist" if arm in ("doctor+dist", "hook only") else "plain")
                    if i:
                        times[(arm, "wall")].append(time.perf_counter() - t0)
                        times[(arm, "cpu")].append(time.process_time() - c0)
            finally:
                if inst is not None:
                    inst.uninstall()
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, times)
    if rank == 0:
        print(f"{'rank':4} {'clock':5} {'plain ms':>9} {'doctor ms':>10} {'+dist ms':>9} {'hook ms':>8}  "
              f"{'doctor/plain [90%]':>24}  {'doctor+dist/plain [90%]':>26}  {'doctor+dist/hook only [90%]':>28}")
        for r, t in enumerate(gathered):
            for clock in ("wall", "cpu"):
                base = t[("plain", clock)]
                meds = [quantile(t[(arm, clock)], 0.5) * 1e3 for arm in ARMS]
                cells = []
                for arm, ref in (("doctor", "plain"), ("doctor+dist", "plain"), ("doctor+dist", "hook only")):
                    a, b0 = t[(arm, clock)], t[(ref, clock)]
                    ri = ratio_interval(a, b0)
                    cells.append(f"{quantile(a, 0.5) / quantile(b0, 0.5):.3f} [{ri.low:.3f}, {ri.high:.3f}]")
                print(f"{r:4} {clock:5} {meds[0]:9.2f} {meds[1]:10.2f} {meds[2]:9.2f} {meds[3]:8.2f}  {cells[0]:>24}  "
                      f"{cells[1]:>26}  {cells[2]:>28}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--block", type=int, default=6, help="steps per block")
    parser.add_argument("--width", type=int, default=256, help="MLP width")
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_worker:
        _rank_main(args)
        return
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.abspath(__file__), "--rank-worker", "--blocks", str(args.blocks), "--block", str(args.block),
           "--width", str(args.width)]
    raise SystemExit(subprocess.call(cmd))


if __name__ == "__main__":
    main()
