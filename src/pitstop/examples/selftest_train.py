"""The workload of ``pitstop selftest``: the bundled small CNN trained on a chosen device.

Plain fp32 training (so the doctor's precision probe has something to measure), the batch
moved to the device in the loop, DataLoader in the main process, no host sync per step:

    python -m pitstop.examples.selftest_train --device cuda --steps 40
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticImages
from pitstop.examples.models import make_cnn


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("selftest_train: --device cuda but no CUDA device is available")

    torch.manual_seed(0)
    model = make_cnn(naive=False).to(args.device)
    loader = DataLoader(SyntheticImages(n=64 * args.batch_size, work=1, seed=0), batch_size=args.batch_size,
                        shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(args.device), y.to(args.device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break
    print(f"done: {step} steps on {args.device}, last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
