"""DDP vs FSDP2 on one model, per rank: step time (side by side) and memory (docs/guide/fsdp.md).

For each world size (``--ranks 2 4``) this launches, with ``torch.distributed.run`` (gloo, CPU,
one thread per rank):

- one **timing** job: every rank builds the model twice from the same seed, once wrapped in
  ``DistributedDataParallel`` and once sharded by FSDP2 the way pitstop's engine shards
  (:func:`pitstop.engine.sharded.shard_model`: one unit per block, then the root), each with its
  AdamW, and trains them in alternating blocks of ``--steps`` steps (the order flips every
  round) on the same batches. A block starts after a barrier; its steps are timed on each rank.
  Printed per rank: the median step of each arm, the FSDP2/DDP ratio of the per-round medians
  with a 90% bootstrap interval over rounds, and the largest relative difference between the
  two arms' losses (same math: they must agree);
- two **memory** jobs (DDP, then FSDP2), one model per process: per rank, the training state
  it holds after a step (parameters, gradients and AdamW state: the local shards under FSDP2,
  counted from the tensors), the peak of live tensor bytes during one step (PyTorch's
  ``MemTracker``, through :func:`pitstop.engine.phase_memory.memtracker_peak`: gathered
  parameters, DDP's buckets and activations included), and the growth of the process's peak RSS
  from just before the model was built (what the C allocator took, whatever it kept).

    python benchmarks/fsdp_vs_ddp.py [--ranks 2 4] [--width 1024] [--blocks 6] [--rounds 8] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

MIB = 2**20


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _model(args):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(args.width) for _ in range(args.blocks))
            self.head = nn.Linear(args.width, 1)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    torch.manual_seed(0)
    return Net()


def _wrap(model, strategy):
    import torch

    if strategy == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from pitstop.engine.sharded import shard_model

    shard_model(model, torch.device("cpu"))
    return model


def _state_bytes(model, opt) -> int:
    import torch

    def local(t):
        return getattr(t, "_local_tensor", t)
    seen = {}
    for t in [*model.parameters(), *(p.grad for p in model.parameters() if p.grad is not None),
              *(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v))]:
        t = local(t)
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _batches(args, rank):
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    xs = [torch.randn(args.batch, args.width, generator=g) for _ in range(8)]
    return [(x, x.sum(1, keepdim=True) / args.width) for x in xs]


def _step(model, opt, batch):
    import torch

    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def _rank_time(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    batches = _batches(args, rank)
    arms = {}
    for strategy in ("ddp", "fsdp2"):
        model = _wrap(_model(args), strategy)
        arms[strategy] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    losses = {k: [] for k in arms}
    times = {k: [] for k in arms}
    used = {k: 0 for k in arms}
    for r in range(args.rounds + 1):  # round 0: warm-up, not timed
        order = ("ddp", "fsdp2") if r % 2 == 0 else ("fsdp2", "ddp")
        for arm in order:
            model, opt = arms[arm]
            dist.barrier()
            block = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                loss = _step(model, opt, batches[used[arm] % len(batches)])
                block.append(time.perf_counter() - t0)
                losses[arm].append(float(loss))
                used[arm] += 1
            if r:
                times[arm].append(sorted(block)[len(block) // 2])
    _write(args, rank, {"rank": rank, "times": times, "losses": losses})
    dist.barrier()
    dist.destroy_process_group()


def _rank_mem(args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    batches = _batches(args, rank)
    before = _rss()
    model = _wrap(_model(args), args.strategy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state = 0
    for i in range(3):
        x, y = batches[i]
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        state = _state_bytes(model, opt)  # gradients still held: the state right after a step
        opt.zero_grad(set_to_none=True)
    from pitstop.engine.phase_memory import memtracker_peak

    tensor_peak = memtracker_peak(lambda: _step(model, opt, batches[3]), model, opt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    _write(args, rank, {"rank": rank, "state": state, "tensor_peak": tensor_peak, "peak_growth": peak - before})
    dist.barrier()
    dist.destroy_process_group()


def _write(args, rank: int, result: dict) -> None:
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def _launch(n: int, *extra: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), __file__,
               *extra, "--out", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        if proc.returncode:
            sys.exit(proc.stdout[-2000:] + proc.stderr[-4000:])
        return [json.loads(open(os.path.join(out, f"rank{r}.json")).read()) for r in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rank-mode", choices=("time", "mem"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--strategy", choices=("ddp", "fsdp2"), default="ddp", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_mode == "time":
        return _rank_time(args)
    if args.rank_mode == "mem":
        return _rank_mem(args)
    from pitstop.stats import paired_ratio_interval

    common = ["--width", str(args.width), "--blocks", str(args.blocks), "--batch", str(args.batch)]
    params = args.blocks * (4 * args.width * args.width + 3 * args.width) + args.width + 1
    print(f"model: {args.blocks} blocks of width {args.width}, {params / 1e6:.1f}M parameters "
          f"({params * 4 / MIB:.0f} MiB fp32), AdamW, batch {args.batch} per rank; gloo, 1 thread per rank")
    print("| ranks | rank | DDP step | FSDP2 step | FSDP2 / DDP [90% CI] | loss diff | DDP state | FSDP2 state "
          "| DDP tensor peak | FSDP2 tensor peak | DDP peak RSS growth | FSDP2 peak RSS growth |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.ranks:
        timing = _launch(n, "--rank-mode", "time", "--rounds", str(args.rounds), "--steps", str(args.steps), *common)
        mem = {s: _launch(n, "--rank-mode", "mem", "--strategy", s, *common) for s in ("ddp", "fsdp2")}
        for t, md, mf in zip(timing, mem["ddp"], mem["fsdp2"]):
            d, f = t["times"]["ddp"], t["times"]["fsdp2"]
            ci = paired_ratio_interval([b / a for a, b in zip(d, f)])
            diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(t["losses"]["ddp"], t["losses"]["fsdp2"]))
            med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
            print(f"| {n} | {t['rank']} | {med(d) * 1e3:.0f} ms | {med(f) * 1e3:.0f} ms | {ci.ratio:.2f} "
                  f"[{ci.low:.2f}, {ci.high:.2f}] | {diff:.1e} | {md['state'] / MIB:.0f} MiB | {mf['state'] / MIB:.0f} MiB "
                  f"| {md['tensor_peak'] / MIB:.0f} MiB | {mf['tensor_peak'] / MIB:.0f} MiB "
                  f"| {md['peak_growth'] / MIB:.0f} MiB | {mf['peak_growth'] / MIB:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
