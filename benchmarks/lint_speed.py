"""Lint throughput: lines/second over a generated corpus of realistic training code.

    python benchmarks/lint_speed.py [--lines 50000] [--repeats 3] [--jobs N] [--corpus ~/.cache/pitstop/lint-corpus]

Runs every pitstop lint rule single-process and in parallel (one worker per core) over the
same corpus; when TorchFix is installed (extra ``compare``) the same corpus goes through
TorchFix's checker (its flake8 entry point: parse, metadata, all default visitors) in the
same run. Repeats are interleaved so machine noise hits every variant alike; the medians
and the ratios are printed. Not a test: timings belong here, not in the test suite.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TEMPLATES = [
    '''
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class {Model}(nn.Module):
    def __init__(self, width={width}, classes={classes}):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.head = nn.Sequential(nn.Linear(width, {hidden}), nn.ReLU(), nn.Linear({hidden}, classes))

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.head(x.mean(dim=(2, 3)))


def {evaluate}(model, loader, device):
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    return correct / max(total, 1)


def {train}(epochs={epochs}, lr={lr}):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = torch.tensor(np.random.rand({n}, 3, 16, 16).astype(np.float32))
    labels = torch.randint(0, {classes}, ({n},))
    loader = DataLoader(TensorDataset(data, labels), batch_size={bs}, shuffle=True)
    model = {Model}().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)
    losses = []
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x = x.to(device)
            y = y.to(device)
            optimizer.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss)
            print(f"epoch {{epoch}} step {{step}} loss {{loss.item():.4f}}")
            if step % {every} == 0:
                print("acc", {evaluate}(model, loader, device))
    torch.save(model, "{name}.pt")
    return losses
''',
    '''
import math

import torch
from torch import nn
from torch.nn import functional as F


class {Model}(nn.Module):
    def __init__(self, vocab={vocab}, dim={width}, heads=4, block={block}):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.ln = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.heads = heads

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return self.lm_head(x)


@torch.inference_mode()
def {evaluate}(model, batches):
    model.eval()
    out = torch.stack([F.cross_entropy(model(x).flatten(0, 1), y.flatten()) for x, y in batches]).mean()
    model.train()
    return out


def {train}(model, get_batch, steps={n}, accum={accum}, device="cuda"):
    opt = torch.optim.AdamW(model.parameters(), lr={lr}, fused=True)
    scaler = torch.cuda.amp.GradScaler()
    for it in range(steps):
        lr = {lr} * 0.5 * (1 + math.cos(math.pi * it / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        for micro in range(accum):
            x, y = get_batch()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()) / accum
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if it % {every} == 0:
            print(it, loss.item())
    return model
''',
]


def make_corpus(root: Path, target_lines: int, seed: int = 0) -> tuple[list[Path], int]:
    rng = random.Random(seed)
    files, lines, i = [], 0, 0
    while lines < target_lines:
        t = TEMPLATES[i % len(TEMPLATES)]
        text = t.format(Model=f"Net{i}", evaluate=f"evaluate_{i}", train=f"train_{i}", name=f"m{i}",
                        width=rng.choice([32, 64, 100, 128]), classes=rng.choice([10, 100]),
                        hidden=rng.choice([128, 250, 256]), epochs=rng.randint(1, 9), lr=rng.choice([1e-3, 3e-4]),
                        n=rng.randint(100, 5000), bs=rng.choice([32, 64, 128]), every=rng.choice([10, 50, 100]),
                        vocab=rng.choice([1000, 50257, 50304]), block=rng.choice([64, 128, 256]),
                        accum=rng.randint(1, 8))
        path = root / f"train_{i:05d}.py"
        path.write_text(text.lstrip(), encoding="utf-8")
        files.append(path)
        lines += text.count("\n")
        i += 1
    return files, lines


def pitstop_serial(files):
    return pitstop_parallel(files, 1)  # run_tasks with one job: in process, project index included


def pitstop_parallel(files, jobs):
    from pitstop.lint.index import project
    from pitstop.lint.parallel import LintOptions, Task, run_tasks
    from pitstop.lint.runner import all_rule_classes

    # every repeat pays the project-index pass, as a fresh `pitstop lint` process does
    project.clear_caches()
    codes = tuple(all_rule_classes())
    run = run_tasks([Task(str(f), str(f), codes) for f in files], LintOptions(jobs=jobs))
    assert not run.errors, run.errors[:3]
    return len(run.findings)


def _torchfix_files(files):
    from torchfix.torchfix import TorchChecker

    n = 0
    for f in files:
        lines = Path(f).read_text(encoding="utf-8").splitlines(keepends=True)
        n += sum(1 for _ in TorchChecker(None, lines).run())
    return n


def torchfix_serial(files):
    return _torchfix_files(files)


def torchfix_parallel(files, jobs):
    chunks = [files[i::jobs * 4] for i in range(jobs * 4)]
    with ProcessPoolExecutor(jobs) as pool:
        return sum(pool.map(_torchfix_files, chunks))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--corpus", type=Path, help="lint the *.py files of this folder (e.g. the lint corpus that "
                                                "benchmarks/lint_corpus_build.py builds: real training code) "
                                                "instead of a generated corpus")
    args = ap.parse_args(argv)
    try:
        import torchfix  # noqa: F401
        have_torchfix = True
    except ImportError:
        have_torchfix = False
        print("TorchFix not installed (pip install -e '.[compare]'): pitstop only")
    with tempfile.TemporaryDirectory() as tmp:
        if args.corpus is not None:
            files = sorted(args.corpus.rglob("*.py"))
            lines = sum(f.read_text(encoding="utf-8").count("\n") for f in files)
        else:
            files, lines = make_corpus(Path(tmp), args.lines)
        print(f"corpus: {len(files)} files, {lines} lines; {args.jobs} jobs; {args.repeats} interleaved repeats; "
              f"python {sys.version.split()[0]}")
        variants = {"pitstop (1 process)": lambda: pitstop_serial(files),
                    f"pitstop ({args.jobs} processes)": lambda: pitstop_parallel(files, args.jobs)}
        if have_torchfix:
            variants["torchfix (1 process)"] = lambda: torchfix_serial(files)
            variants[f"torchfix ({args.jobs} processes)"] = lambda: torchfix_parallel(files, args.jobs)
        times = {k: [] for k in variants}
        counts = {}
        for _ in range(args.repeats):
            for name, fn in variants.items():
                t0 = time.perf_counter()
                counts[name] = fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in variants:
            print(f"{name:28s} {lines / med[name]:9.0f} lines/s  (median {med[name]:.2f} s; {counts[name]} findings)")
        if have_torchfix:
            for mode in ("1 process", f"{args.jobs} processes"):
                ratio = med[f"torchfix ({mode})"] / med[f"pitstop ({mode})"]
                print(f"pitstop / torchfix throughput, {mode}: {ratio:.2f}x "
                      f"(pitstop runs {len(__import__('pitstop.lint.runner', fromlist=['x']).all_rule_classes())} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
