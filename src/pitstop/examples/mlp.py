"""Naive MLP training on a tabular numpy dataset — with the seeds' mistakes.

    python -m pitstop.examples.mlp --steps 20
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from pitstop.examples.data import SyntheticTabular
from pitstop.examples.models import make_mlp


def test(model, x, y):
    with torch.no_grad():  # PIT605
        model.eval()
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=10)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    table = SyntheticTabular(n=8192, seed=0)
    x_all = torch.tensor(np.asarray(table.x))  # PIT105: copies; torch.from_numpy shares memory
    y_all = torch.tensor(table.y)
    x_val, y_val = x_all[:512], y_all[:512]
    loader = DataLoader(TensorDataset(x_all[512:], y_all[512:]), batch_size=args.batch_size, shuffle=True)  # PIT101
    model = make_mlp(naive=True)  # PIT604: width 500; PIT606: two adjacent Linear layers
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4, foreach=False)  # PIT502, PIT501

    history = []
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=False)  # PIT403
            loss.backward()
            optimizer.step()
            history.append(loss)  # PIT202
            print(f"step {step:4d}  loss {loss.item():.4f}")  # PIT201
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d}  test acc {test(model, x_val, y_val):.3f}")
            if step >= args.steps:
                break
    print(f"done: {step} steps, last loss {history[-1].item():.4f}")


if __name__ == "__main__":
    main()
