"""Fused SGD on channels_last parameters vs the for-loop vs fused on contiguous parameters.

A review claim to check: on this CPU, ``SGD(momentum=0.9, fused=True)`` is slower than the
for-loop (``foreach=False``) when the model was converted with
``model.to(memory_format=torch.channels_last)``, while fused on the same model left
contiguous is the fastest. Four copies of the bundled conv net (``pitstop.examples``), each
with its own optimizer and fixed gradients (``randn_like``: same strides as the parameter):

- ``fused_cl``: channels_last parameters, ``fused=True``
- ``loop_cl``: channels_last parameters, ``foreach=False`` (the for-loop)
- ``fused_contig``: contiguous parameters, ``fused=True``
- ``loop_contig``: contiguous parameters, the for-loop (separates the layout's cost from
  the implementation's)

One thread. The variants run in short blocks, interleaved (rotating order per round), and
each block's median step time is kept; the script prints the medians over blocks and the
ratios with a 90% bootstrap interval. Only ``optimizer.step()`` is timed.

    python benchmarks/fused_channels_last.py [--rounds 60] [--block 20]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from pitstop.examples.models import make_cnn
from pitstop.stats import ratio_interval


def _variant(model: torch.nn.Module, channels_last: bool, fused: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = copy.deepcopy(model)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.empty_like(p).copy_(torch.randn(p.shape, generator=g))  # the parameter's strides
    kind = {"fused": True} if fused else {"foreach": False}
    return model, torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9, **kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--block", type=int, default=20, help="optimizer steps per block")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = make_cnn(naive=True)
    variants = {"fused_cl": _variant(base, True, True), "loop_cl": _variant(base, True, False),
                "fused_contig": _variant(base, False, True), "loop_contig": _variant(base, False, False)}
    model, _ = variants["fused_cl"]
    n_cl = sum(p.dim() == 4 and not p.is_contiguous() for p in model.parameters())
    print(f"torch {torch.__version__}, 1 thread; {sum(1 for _ in model.parameters())} parameter tensors "
          f"({sum(p.numel() for p in model.parameters()):,} values), {n_cl} of them non-contiguous after "
          "channels_last")
    for _, opt in variants.values():  # warm-up (momentum buffers, first-call costs)
        for _ in range(5):
            opt.step()
    blocks: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            opt = variants[name][1]
            times = []
            for _ in range(args.block):
                t0 = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - t0)
            blocks[name].append(statistics.median(times))
    for name in names:
        print(f"{name:>13}: median {statistics.median(blocks[name]) * 1e3:.4f} ms per step "
              f"({args.rounds} blocks of {args.block})")
    for base_name, cand in (("loop_cl", "fused_cl"), ("fused_contig", "fused_cl"), ("loop_contig", "loop_cl"),
                            ("loop_contig", "fused_contig")):
        ri = ratio_interval(blocks[cand], blocks[base_name])
        print(f"{cand} / {base_name}: {ri.ratio:.2f}x the time  (90% CI {ri.low:.2f}-{ri.high:.2f})")


if __name__ == "__main__":
    main()
