"""An FSDP2 training loop for the GPU check (benchmarks/gpu_check.sh, stage ``fsdp``).

    torchrun --nproc-per-node N benchmarks/gpu_fsdp.py [--device cuda|cpu] [--steps 40]

A stack of residual MLP blocks, ``fully_shard`` per block and at the root, bf16 all-gathers
(``MixedPrecisionPolicy``), AdamW: the job ``pitstop doctor --nproc-per-node N --trace DIR`` then
``pitstop trace DIR`` read. On CUDA each rank takes the GPU of its LOCAL_RANK and NCCL; with one
GPU (one rank) FSDP2 runs no collective at all (it skips the all-gather and reduce-scatter of a
one-rank mesh), so the doctor and the trace find the units and no collective: the collectives
need two GPUs or more. ``--device cpu``: gloo, for a rehearsal.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--blocks", type=int, default=8)
    args = p.parse_args()
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    width = args.width if cuda else 128
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(width) for _ in range(args.blocks)), nn.Linear(width, 1)).to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in list(model)[:-1]:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    try:
        for _ in range(args.steps):
            x = torch.randn(64 if cuda else 16, width, device=device)
            loss = nn.functional.mse_loss(model(x).float(), x.sum(1, keepdim=True))
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
