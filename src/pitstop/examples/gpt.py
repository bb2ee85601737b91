"""Naive GPT-style transformer training on synthetic tokens — with the seeds' mistakes.

    python -m pitstop.examples.gpt --steps 20
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticTokens
from pitstop.examples.models import make_gpt


def validate(model, loader):
    total = 0.0
    with torch.no_grad():  # PIT605 and PIT803: no inference_mode, and model.eval() is never called
        for idx, targets in loader:
            logits = model(idx)
            total += F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1)).item()
    return total / len(loader)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=10)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = make_gpt(naive=True)  # PIT604: vocabulary of 1000, not a multiple of 64
    train_loader = DataLoader(SyntheticTokens(n=2048, seed=0), batch_size=args.batch_size, shuffle=True)  # PIT101
    val_loader = DataLoader(SyntheticTokens(n=2 * args.batch_size, seed=1), batch_size=args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=False)  # PIT501; PIT502: decay on biases/norms

    running = 0
    step = 0
    while step < args.steps:
        for idx, targets in train_loader:
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss  # PIT202: the sum holds every step's graph
            print(f"step {step:4d}  loss {loss.item():.4f}")  # PIT201
            step += 1
            if step % args.eval_every == 0:
                print(f"step {step:4d}  val loss {validate(model, val_loader):.4f}")
            if step >= args.steps:
                break
    print(f"done: {step} steps, mean loss {running.item() / max(step, 1):.4f}")


if __name__ == "__main__":
    main()
