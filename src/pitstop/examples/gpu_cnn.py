"""A small conv net fed by a CPU input pipeline, trained on CUDA when present (CPU otherwise).

A plain, reasonable script (not a naive one): per-sample CPU augmentation in DataLoader
workers, pinned memory and non-blocking copies on CUDA, the loss read on the host only every
``--log-every`` steps. It is the conv-net workload of ``benchmarks/gpu_check.sh`` (the doctor,
tune and trace on a GPU); fp32 on purpose, so the precision probe has something to measure:

    python -m pitstop.examples.gpu_cnn --steps 60
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticImages
from pitstop.examples.models import make_cnn

__all__ = ["main", "pick_device"]


def pick_device(requested: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; ``cuda`` without a GPU is an error."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but no CUDA device is available")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(requested)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--width", type=int, default=32, help="channels of the first conv layer")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--work", type=int, default=2, help="blur passes per sample (the pipeline's CPU cost)")
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    cuda = device.type == "cuda"

    torch.manual_seed(0)
    model = make_cnn(naive=False, width=args.width).to(device)
    data = SyntheticImages(n=max(args.steps, 1) * args.batch_size, work=args.work, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        pin_memory=cuda, persistent_workers=args.workers > 0, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0 or step == args.steps:
                print(f"step {step:4d}  loss {loss.item():.4f}  on {device}")
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
