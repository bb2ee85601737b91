"""pitstop tune's stagewise path on a starved conv loop, on CUDA (issue 28).

    python benchmarks/gpu_tune_path.py --out DIR [--budget 100] [--compile]

The workload (written to ``DIR/starved_conv.py`` and run unmodified): our own small conv net
(no torchvision) trained on 128x128 images whose ``__getitem__`` is CPU-heavy (a per-sample
smoothing loop) behind a DataLoader with no workers, so the GPU waits for the host. The search is
script mode's (``pitstop.tune.api.tune_script``, what ``pitstop tune`` runs) over DataLoader
workers, bf16 autocast and channels_last (``--only PIT101,PIT301,PIT104``; ``--compile`` adds
torch.compile: default, max-autotune-no-cudagraphs and reduce-overhead; ``--all`` every GPU knob:
pinned memory + non_blocking copies, TF32, cudnn.benchmark and the fused optimizer too), under
``--budget`` seconds (default 95: the whole run stays under 120 s on an H100). Expected shape:
workers first, then each GPU-side trick measured again on top, each stage with a number.

Written to ``DIR``: ``tune_path.txt`` (the terminal report, the path section included) and
``tune_path.json`` (``stages[]``, the recipe), the device named in both. On a machine without CUDA
it prints ``skipped: no CUDA device`` and exits 0.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

WORKLOAD = '''"""A conv net starved by its input pipeline (written by benchmarks/gpu_tune_path.py)."""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class Heavy(Dataset):
    def __init__(self, n=4096, size=128, work=40):
        self.n, self.size, self.work = n, size, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, self.size, self.size, generator=g)
        for _ in range(self.work):  # CPU-heavy per-sample preprocessing
            img = (img.roll(1, -1) + img.roll(-1, -2) + img) / 3
        return img, i % 10


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1), nn.ReLU(), block(64, 128, 2), block(128, 128, 1),
                          block(128, 256, 2), block(256, 256, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(256, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Heavy(), batch_size=64, shuffle=True)
    for epoch in range(100):
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''

KNOBS = ("PIT101", "PIT301", "PIT104")  # the set
MORE = ("PIT102", "PIT304", "PIT602", "PIT501")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the workload, tune_path.txt and .json")
    parser.add_argument("--budget", type=float, default=95.0, help="seconds for the search (default 95)")
    parser.add_argument("--compile", action="store_true", help="also torch.compile (default, reduce-overhead)")
    parser.add_argument("--all", action="store_true", help="every GPU knob (needs a larger --budget)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    from pitstop.atomic import write_atomic
    from pitstop.report.tune_terminal import render_json, render_text
    from pitstop.tune.api import tune_script

    device = f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    args.out.mkdir(parents=True, exist_ok=True)
    script = args.out / "starved_conv.py"
    write_atomic(script, WORKLOAD)
    only = KNOBS + (MORE if args.all else ()) + (("PIT601",) if args.compile else ())
    started = time.perf_counter()
    # 2 pairs at least per comparison, short runs: the path's stages must fit the budget
    result = tune_script(str(script), steps=6, warmup=2, repeats=2, max_pairs=4, budget=args.budget, only=only,
                         timeout=60.0, cwd=str(args.out))
    took = time.perf_counter() - started
    buf = io.StringIO()
    render_text(result, file=buf, width=160)
    head = f"device: {device}; search {took:.0f} s (budget {args.budget:.0f} s); knobs {', '.join(only)}\n"
    write_atomic(args.out / "tune_path.txt", head + buf.getvalue())
    write_atomic(args.out / "tune_path.json", render_json(result))
    print(head + buf.getvalue())
    print(f"wrote {args.out / 'tune_path.txt'} and {args.out / 'tune_path.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
