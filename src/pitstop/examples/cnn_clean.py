"""The bundled CNN training done right: the clean twin of ``pitstop.examples.cnn``.

Same model architecture, data and optimizer as the naive script, with every planted
problem fixed: DataLoader workers (PIT101), no conv bias before BatchNorm (PIT603),
channels_last (PIT104), bf16 autocast (PIT301; ``--precision fp32`` to turn it off),
fused SGD (PIT501), losses kept on the device and read every ``--log-every`` steps
(PIT201, PIT202), evaluation in eval mode under ``inference_mode`` (PIT605, PIT803).
``pitstop doctor -m pitstop.examples.cnn_clean`` should find nothing of high impact:

    python -m pitstop.examples.cnn_clean --steps 20
"""

from __future__ import annotations

import argparse
import contextlib

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticImages
from pitstop.examples.models import make_cnn


def evaluate(model, loader, autocast):
    model.eval()
    correct = torch.zeros((), dtype=torch.long)
    total = 0
    with torch.inference_mode(), autocast():
        for x, y in loader:
            x = x.contiguous(memory_format=torch.channels_last)
            correct += (model(x).argmax(dim=1) == y).sum()
            total += y.numel()
    model.train()
    return correct.item() / max(total, 1)  # one sync per evaluation, not per batch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--work", type=int, default=6, help="blur passes per sample (data cost)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = make_cnn(naive=False).to(device, memory_format=torch.channels_last)
    train_set = SyntheticImages(n=4096, work=args.work, seed=0)
    val_set = SyntheticImages(n=2 * args.batch_size, work=args.work, seed=1)
    loader_kw = dict(num_workers=args.workers, persistent_workers=args.workers > 0, pin_memory=device == "cuda")
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **loader_kw)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, **loader_kw)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, fused=True)

    def autocast():
        if args.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device, dtype=torch.bfloat16)

    running = torch.zeros((), device=device)
    step = 0
    while step < args.steps:
        for x, y in train_loader:
            x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.detach()  # stays on the device: no sync, no graph kept
            step += 1
            if step % args.log_every == 0:
                print(f"step {step:4d}  loss {running.item() / args.log_every:.4f}")
                running.zero_()
            if step % args.eval_every == 0:
                print(f"step {step:4d}  val acc {evaluate(model, val_loader, autocast):.3f}")
            if step >= args.steps:
                break
    print(f"done: {step} steps")


if __name__ == "__main__":
    main()
