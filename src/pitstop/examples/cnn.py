"""Naive CNN training on synthetic images — written the way the seeds say NOT to.

This is the bundled default workload of ``pitstop doctor`` and ``pitstop tune``. Every
planted problem is marked with the catalog code that finds it:

    python -m pitstop.examples.cnn --steps 20
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticImages
from pitstop.examples.models import make_cnn


def evaluate(model, loader):
    correct = 0
    total = 0
    with torch.no_grad():  # PIT605: inference_mode is cheaper for evaluation
        model.eval()
        for x, y in loader:
            pred = model(x).argmax(dim=1)
            correct += (pred == y).sum().item()
            total += y.numel()
    model.train()
    return correct / max(total, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--work", type=int, default=6, help="blur passes per sample (data cost)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = make_cnn(naive=True)  # PIT603: conv bias before BatchNorm; PIT104: NCHW
    train_set = SyntheticImages(n=4096, work=args.work, seed=0)
    val_set = SyntheticImages(n=2 * args.batch_size, work=args.work, seed=1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)  # PIT101: num_workers=0
    val_loader = DataLoader(val_set, batch_size=args.batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, foreach=False)  # PIT501

    losses = []
    step = 0
    while step < args.steps:
        for x, y in train_loader:
            out = model(x)  # PIT301: fp32 on a CPU/GPU that is faster in bf16
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss)  # PIT202: keeps every step's autograd graph alive
            print(f"step {step:4d}  loss {loss.item():.4f}")  # PIT201: a host sync every step
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d}  val acc {evaluate(model, val_loader):.3f}")
            if step >= args.steps:
                break
    print(f"done: {step} steps, mean loss {sum(losses).item() / len(losses):.4f}")


if __name__ == "__main__":
    main()
