"""pitstop tune's stagewise path on CUDA: a starved conv loop (issue 28) and a GPT-like fp32 loop
(issue 41).

    python benchmarks/gpu_tune_path.py --out DIR [--workload conv|gpt] [--budget SECONDS] [--compile]

``--workload conv`` (default): our own small conv net (no torchvision) trained on 128x128 images
whose ``__getitem__`` is CPU-heavy (a per-sample smoothing loop) behind a DataLoader with no
workers, so the GPU waits for the host. The search is script mode's
(``pitstop.tune.api.tune_script``, what ``pitstop tune`` runs) over DataLoader workers, bf16
autocast and channels_last (``--only PIT101,PIT301,PIT104``; ``--compile`` adds torch.compile:
default, max-autotune-no-cudagraphs and reduce-overhead; ``--all`` every GPU knob: pinned memory +
non_blocking copies, TF32, cudnn.benchmark and the fused optimizer too), under ``--budget``
seconds (default 95: the whole run stays under 120 s on an H100). Expected shape: workers first,
then each GPU-side trick measured again on top, each stage with a number.

``--workload gpt``: the new user's transformer of issue 41, run as they would run it: a GPT-like
model of about 51M parameters (GPT-2's vocabulary, 8 layers of width 512) trained in fp32 with
``AdamW(foreach=False)``, batches made on the GPU, ``torch.cuda.synchronize()`` and
``torch.cuda.empty_cache()`` every step; ``pitstop tune train.py --budget 160`` with every knob and
the default steps (more per run where set-up dominates). Expected: bf16 (or TF32) kept with a
confirmed interval, set-up at most half of the search's time (``time`` in the JSON: per trial,
split into start, imports, build, first step, compile). Before issue 41 the same search spent
142 of its 160 s in set-up, measured 3 s and decided nothing.

Written to ``DIR``: ``tune_<workload>.txt`` (the terminal report, plan and path included) and
``tune_<workload>.json``, the device named in both, and the workload script. On a machine
without CUDA it prints ``skipped: no CUDA device`` and exits 0.
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

GPT = '''"""A GPT-like model trained in fp32 as a new user would (written by benchmarks/gpu_tune_path.py)."""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, WIDTH, LAYERS, HEADS, CONTEXT, BATCH = 50257, 512, 8, 8, 256, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main():
    torch.manual_seed(0)
    model = GPT().cuda()
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    for step in range(100000):
        batch = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1), device="cuda")
        x, y = batch[:, :-1], batch[:, 1:]
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
'''

KNOBS = ("PIT101", "PIT301", "PIT104")  # the set
MORE = ("PIT102", "PIT304", "PIT602", "PIT501")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the workload, tune_*.txt and .json")
    parser.add_argument("--workload", choices=("conv", "gpt"), default="conv")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the search (default 95 for conv, 160 for gpt)")
    parser.add_argument("--compile", action="store_true", help="conv: also torch.compile (default, reduce-overhead)")
    parser.add_argument("--all", action="store_true", help="conv: every GPU knob (needs a larger --budget)")
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
    started = time.perf_counter()
    if args.workload == "conv":
        budget = 95.0 if args.budget is None else args.budget
        script = args.out / "starved_conv.py"
        write_atomic(script, WORKLOAD)
        only = KNOBS + (MORE if args.all else ()) + (("PIT601",) if args.compile else ())
        # 2 pairs at least per comparison, short runs: the path's stages must fit the budget
        result = tune_script(str(script), steps=6, warmup=2, repeats=2, max_pairs=4, budget=budget, only=only,
                             timeout=60.0, cwd=str(args.out))
        knobs = ", ".join(only)
    else:  # as the new user ran it: every knob, the defaults, --budget 160
        budget = 160.0 if args.budget is None else args.budget
        script = args.out / "gpt_fp32.py"
        write_atomic(script, GPT)
        result = tune_script(str(script), budget=budget, cwd=str(args.out))
        knobs = "all"
    took = time.perf_counter() - started
    buf = io.StringIO()
    render_text(result, file=buf, width=160)
    t = result.time
    setup = (t.survey + t.setup + t.other) / t.total if t is not None and t.total else None
    head = (f"device: {device}; workload {args.workload}; search {took:.0f} s (budget {budget:.0f} s); knobs {knobs}; "
            f"survey + set-up + shutdown {setup:.0%} of the search\n" if setup is not None else "\n")
    write_atomic(args.out / f"tune_{args.workload}.txt", head + buf.getvalue())
    write_atomic(args.out / f"tune_{args.workload}.json", render_json(result))
    print(head + buf.getvalue())
    print(f"wrote {args.out / f'tune_{args.workload}.txt'} and {args.out / f'tune_{args.workload}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
