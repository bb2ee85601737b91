"""Per-step overhead of ``pitstop.fit`` against a hand-written PyTorch loop (and, when the
``compare`` extra is installed, Lightning Fabric, Hugging Face Accelerate and the Lightning
Trainer) on the same tiny MLP, data, optimizer and number of optimizer steps.

    python benchmarks/engine_overhead.py [--steps 300] [--repeats 7] [--threads 1] [--markdown]
    python benchmarks/engine_overhead.py --minimal   # the loop's own microseconds per step

The contenders run interleaved (each repeat runs all of them, in a shuffled order, from the
same initial weights), after one warm-up run each. Printed: median steps/s and the ratio to
the raw loop: the ratio of medians with a 90% bootstrap interval (``pitstop.stats``), and the
median of the per-repeat ratios (each repeat runs every loop back to back, so a slow phase of
a shared machine hits them alike). A tiny model is the worst
case for a loop's own overhead: its step is short, so any per-step cost shows. Every loop reads
the loss on the host once every ``--log-every`` steps and does nothing else per step.
"""

from __future__ import annotations

import argparse
import copy
import logging
import random
import time
import warnings

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from pitstop.engine import Recipe, fit, make_step
from pitstop.stats import ratio_interval, summarize


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def make_loader(batch_size: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4096, 64, generator=g), torch.randint(0, 10, (4096,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(1))


def make_opt(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


# -- contenders: each trains `steps` optimizer steps from `model` -------------------------
def raw_loop(model, loader, steps, log_every):
    opt = make_opt(model)
    done = 0
    while done < steps:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done % log_every == 0:
                loss.item()  # the one host read per interval
            if done >= steps:
                break


def pitstop_fit(model, loader, steps, log_every):
    fit(model, make_opt(model), loss_fn, loader, recipe=Recipe(), max_steps=steps, log_every=log_every, progress=False)


def fabric_loop(model, loader, steps, log_every):
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true")
    model, opt = fabric.setup(model, make_opt(model))
    loader = fabric.setup_dataloaders(loader)
    done = 0
    while done < steps:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            fabric.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done % log_every == 0:
                loss.item()
            if done >= steps:
                break


def accelerate_loop(model, loader, steps, log_every):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model, opt, loader = accelerator.prepare(model, make_opt(model), loader)
    done = 0
    while done < steps:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done % log_every == 0:
                loss.item()
            if done >= steps:
                break


def lightning_trainer(model, loader, steps, log_every):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):
            return loss_fn(self.net, batch)

        def configure_optimizers(self):
            return make_opt(self.net)

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, log_every_n_steps=log_every)
    trainer.fit(Module(model), loader)


def contenders() -> dict:
    found = {"raw loop": raw_loop, "pitstop.fit": pitstop_fit}
    missing = []
    try:
        import lightning  # noqa: F401

        found["Lightning Fabric"] = fabric_loop
        found["Lightning Trainer"] = lightning_trainer
        for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric", "pytorch_lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)
    except ImportError:
        missing.append("lightning")
    try:
        import accelerate  # noqa: F401

        found["Accelerate"] = accelerate_loop
    except ImportError:
        missing.append("accelerate")
    return found, missing


def minimal_overhead(repeats: int, steps: int = 2000) -> None:
    """The loop's own cost per step on a Linear(4, 2) with pre-built batches, where data
    loading and compute are as small as they get (the worst case for overhead).

    make_step: the raw step body and ``step.run`` alternate step by step on two identical
    models, and the median of the per-step paired differences is reported (alternating every
    step cancels the drifts of a shared machine). fit: whole runs of the raw loop and of
    ``fit`` alternate, timed in process CPU time (time other processes take is not counted).
    """
    torch.manual_seed(0)
    init = nn.Linear(4, 2)
    batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(steps)]

    a, b = copy.deepcopy(init), copy.deepcopy(init)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    step = make_step(b, torch.optim.SGD(b.parameters(), lr=0.1), loss_fn, Recipe())
    clock = time.perf_counter_ns
    raw_ns, step_ns = [], []
    for _ in range(repeats):
        for batch in batches:
            t0 = clock()
            loss = loss_fn(a, batch)
            loss.backward()
            opt_a.step()
            opt_a.zero_grad(set_to_none=True)
            t1 = clock()
            step.run(batch)
            t2 = clock()
            raw_ns.append(t1 - t0)
            step_ns.append(t2 - t1)
    diff = summarize([(s - r) / 1e3 for r, s in zip(raw_ns, step_ns)])
    print(f"make_step, {repeats * steps} alternating steps: raw step {summarize(raw_ns).median / 1e3:.1f} us, "
          f"step.run {summarize(step_ns).median / 1e3:.1f} us; paired difference median {diff.median:.1f} us "
          f"[p10 {diff.p10:.1f}, p90 {diff.p90:.1f}]")

    def raw(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i, batch in enumerate(batches):
            loss = loss_fn(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if (i + 1) % 50 == 0:
                loss.item()

    def pit(model):
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, batches, recipe=Recipe(), log_every=50,
            progress=False)

    times: dict[str, list[float]] = {"raw": [], "fit": []}
    for rep in range(repeats + 1):
        for name, run in (("raw", raw), ("fit", pit)) if rep % 2 else (("fit", pit), ("raw", raw)):
            model = copy.deepcopy(init)
            start = time.process_time()
            run(model)
            if rep:
                times[name].append((time.process_time() - start) / steps * 1e6)
    paired = summarize([f - r for r, f in zip(times["raw"], times["fit"])])
    print(f"fit, {repeats} alternating runs of {steps} steps (CPU time): raw loop "
          f"{summarize(times['raw']).median:.1f} us/step, pitstop.fit {summarize(times['fit']).median:.1f} us/step; "
          f"paired difference median {paired.median:.1f} us [p10 {paired.p10:.1f}, p90 {paired.p90:.1f}]")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--minimal", action="store_true", help="only the per-step overhead on a minimal model")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.minimal:
        minimal_overhead(args.repeats)
        return
    runs, missing = contenders()
    init = make_model()
    loader = make_loader(args.batch_size)
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    rng = random.Random(0)
    for rep in range(args.repeats + 1):  # repeat 0 is the warm-up
        rng.shuffle(order)
        for name in order:
            model = copy.deepcopy(init)
            start = time.perf_counter()
            runs[name](model, loader, args.steps, args.log_every)
            elapsed = time.perf_counter() - start
            if rep:
                times[name].append(elapsed)
    raw = times["raw loop"]
    rows = []
    for name in runs:
        speed = args.steps / summarize(times[name]).median
        ci = ratio_interval(raw, times[name])
        # the same repeat ran every loop back to back: its ratio cancels slow drifts of the machine
        paired = summarize([r / t for r, t in zip(raw, times[name])])
        rows.append((name, speed, ci, paired))
    head = (f"tiny MLP 64-256-256-10, AdamW, batch {args.batch_size}, {args.steps} optimizer steps per run, "
            f"{args.repeats} interleaved repeats, torch {torch.__version__}, {args.threads} thread(s)")
    if args.markdown:
        print(head + "\n")
        print("| loop | steps/s (median) | speed vs raw loop [90% CI] | per-repeat ratio, median [p10, p90] |")
        print("|---|---|---|---|")
        for name, speed, ci, paired in rows:
            print(f"| {name} | {speed:,.0f} | {ci.ratio:.3f}x [{ci.low:.3f}, {ci.high:.3f}] | "
                  f"{paired.median:.3f}x [{paired.p10:.3f}, {paired.p90:.3f}] |")
    else:
        print(head)
        for name, speed, ci, paired in rows:
            print(f"  {name:18s} {speed:9,.0f} steps/s   {ci.ratio:.3f}x raw [{ci.low:.3f}, {ci.high:.3f}]   "
                  f"paired {paired.median:.3f}x [{paired.p10:.3f}, {paired.p90:.3f}]")
    if missing:
        print(f"not measured (install the 'compare' extra): {', '.join(missing)}")


if __name__ == "__main__":
    main()
