"""A small decoder-only transformer on synthetic tokens, trained on CUDA when present (CPU otherwise).

Plain fp32 training with AdamW (its default implementation), the loss read on the host only
every ``--log-every`` steps. It is the transformer workload of ``benchmarks/gpu_check.sh``
(the doctor, tune and trace on a GPU):

    python -m pitstop.examples.gpu_transformer --steps 60
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.examples.data import SyntheticTokens
from pitstop.examples.gpu_cnn import pick_device
from pitstop.examples.models import make_gpt

__all__ = ["main"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps to run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256, help="embedding width (n_embd)")
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args(argv)
    device = pick_device(args.device)

    torch.manual_seed(0)
    model = make_gpt(naive=False, block_size=args.block_size, n_layer=args.layers, n_embd=args.width,
                     n_head=max(1, args.width // 64), dropout=0.0).to(device)
    data = SyntheticTokens(n=max(args.steps, 1) * args.batch_size, block_size=args.block_size, vocab_size=1024)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        pin_memory=device.type == "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    step = 0
    while step < args.steps:
        for idx, targets in loader:
            idx, targets = idx.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
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
