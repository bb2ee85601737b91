"""``pitstop.fit`` against a hand-written loop with the same recipe, on CUDA (or the CPU).

The recipe: bf16 autocast, channels_last, the fused AdamW, ``torch.compile`` (CUDA default;
``--no-compile`` / ``--compile``). Both loops train the same small conv net from the same
initial weights on the same batches (pre-made on the host, pinned on CUDA, copied with
``non_blocking=True``), read the loss on the host every ``--log-every`` steps and nothing else
per step. Each run is timed from the end of its ``--warmup``-th optimizer step to its last one
(on CUDA by two CUDA events on the compute stream, read after one synchronize; on the CPU by the
host clock), so compile time and warm-up are excluded. First each loop runs ``--warm-runs``
times untimed (CUDA default 1: compile, cuDNN's algorithm choice, the caching allocator, GPU
clocks), then runs alternate (raw, fit, fit, raw, ...), ``--repeats`` of each (CUDA default 7,
short runs: on the H100 three 300-step repeats of the same loop spread 286-361 steps/s);
printed: steps/s of each, the engine/raw ratio of medians and the median of the per-repeat
ratios with a 90% interval (``pitstop.stats.paired_ratio_interval``), the device named.

    python benchmarks/engine_vs_raw.py                      # CUDA when present
    python benchmarks/engine_vs_raw.py --device cpu          # small: 30 steps, batch 16, width 16
    python benchmarks/engine_vs_raw.py --out DIR            # also DIR/engine_vs_raw.{json,md}
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from pitstop.atomic import write_atomic
from pitstop.engine import Recipe, fit
from pitstop.engine.callbacks import Callback
from pitstop.examples.models import make_cnn
from pitstop.stats import paired_ratio_interval, summarize


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"{p.name} (CUDA {torch.version.cuda}, capability {p.major}.{p.minor})"
    from pitstop.machine import cpu_features

    return f"CPU {cpu_features().model or platform.processor()} ({torch.get_num_threads()} threads)"


def make_batches(n: int, batch: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        x, y = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
        out.append((x.pin_memory(), y.pin_memory()) if device.type == "cuda" else (x, y))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Span:
    """Seconds from ``start()`` to ``stop()``: CUDA events on the current stream (no sync at
    the start; one at the end), the host clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.t0 = None

    def start(self) -> None:
        if self.cuda:
            self.begin.record()
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return self.begin.elapsed_time(self.end) / 1e3
        return time.perf_counter() - self.t0


def raw_loop(state, batches, device, args) -> float:
    """The hand-written loop: the same recipe, spelled out. Returns steps/s after warm-up."""
    model = make_cnn(naive=False, width=args.width)
    model.load_state_dict(state)
    model = model.to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    train = torch.compile(model) if args.compile else model
    train.train()
    done, span = 0, Span(device)
    while done < args.steps:
        for x, y in batches:
            x = x.to(device, non_blocking=True, memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(train(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done % args.log_every == 0:
                loss.item()
            if done == args.warmup:
                span.start()
            if done >= args.steps:
                break
    return (args.steps - args.warmup) / span.stop()


class _Clock(Callback):
    """Starts the span at the end of the warm-up step."""

    def __init__(self, warmup: int, device: torch.device):
        self.warmup, self.span = warmup, Span(device)

    def on_step_end(self, state, loss) -> None:
        if state.step == self.warmup:
            self.span.start()


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def engine_fit(state, batches, device, args) -> float:
    """``pitstop.fit`` with the recipe. Returns steps/s after warm-up."""
    model = make_cnn(naive=False, width=args.width)
    model.load_state_dict(state)
    recipe = Recipe(precision="bf16-mixed", channels_last=True, optimizer_impl="fused",
                    compile="default" if args.compile else None, device=str(device), non_blocking=True)
    clock = _Clock(args.warmup, device)
    fit(model, torch.optim.AdamW(model.parameters(), lr=1e-3), _loss, batches, recipe=recipe,
        max_steps=args.steps, log_every=args.log_every, callbacks=[clock], progress=False)
    return (args.steps - args.warmup) / clock.span.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 200 CUDA, 30 CPU)")
    p.add_argument("--warmup", type=int, default=None, help="steps before timing (default 30 CUDA, 5 CPU)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs of each loop (default 7 CUDA, 3 CPU)")
    p.add_argument("--warm-runs", type=int, default=None, help="untimed runs of each loop first (default 1 CUDA, 0 CPU)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 256 CUDA, 16 CPU)")
    p.add_argument("--width", type=int, default=None, help="channels of the conv net's first layer (64 CUDA, 16 CPU)")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile in both loops (default: on CUDA, off on the CPU: minutes on 2 cores)")
    p.add_argument("--out", type=Path, help="also write engine_vs_raw.json and engine_vs_raw.md here")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    cuda = device.type == "cuda"
    args.steps = args.steps or (200 if cuda else 30)
    args.warmup = args.warmup if args.warmup is not None else (30 if cuda else 5)
    args.repeats = args.repeats if args.repeats is not None else (7 if cuda else 3)
    args.warm_runs = args.warm_runs if args.warm_runs is not None else (1 if cuda else 0)
    args.batch = args.batch or (256 if cuda else 16)
    args.width = args.width or (64 if cuda else 16)
    args.compile = cuda if args.compile is None else args.compile
    if not 0 < args.warmup < args.steps or args.repeats < 1 or args.warm_runs < 0:
        p.error(f"need 0 < --warmup ({args.warmup}) < --steps ({args.steps}), --repeats >= 1, --warm-runs >= 0")

    torch.manual_seed(0)
    state = {k: v.clone() for k, v in make_cnn(naive=False, width=args.width).state_dict().items()}
    batches = make_batches(16, args.batch, device)
    name = device_name(device)
    recipe = f"bf16 autocast, channels_last, fused AdamW, compile {'on' if args.compile else 'off'}"
    print(f"engine vs raw loop on {name}: SmallCNN(width={args.width}), batch {args.batch}x3x32x32, {recipe}; "
          f"{args.steps} steps per run, timed after {args.warmup}, {args.warm_runs} untimed run(s) then "
          f"{args.repeats} repeat(s), {'CUDA-event' if cuda else 'host-clock'} timing", flush=True)
    for i in range(args.warm_runs):
        for label, fn in (("raw loop", raw_loop), ("pitstop.fit", engine_fit)):
            print(f"  warm-up {i + 1}: {label:<12} {fn(state, batches, device, args):9.4g} steps/s (untimed)", flush=True)
    runs = {"raw loop": [], "pitstop.fit": []}
    for i in range(args.repeats):
        order = [("raw loop", raw_loop), ("pitstop.fit", engine_fit)]
        for label, fn in order if i % 2 == 0 else order[::-1]:
            runs[label].append(fn(state, batches, device, args))
            print(f"  repeat {i + 1}: {label:<12} {runs[label][-1]:9.4g} steps/s", flush=True)
    raw, eng = summarize(runs["raw loop"]).median, summarize(runs["pitstop.fit"]).median
    paired = paired_ratio_interval([e / r for e, r in zip(runs["pitstop.fit"], runs["raw loop"])], confidence=0.9)
    band = f"90% interval {paired.low:.3f}-{paired.high:.3f}" if args.repeats > 1 else "no interval from one repeat"
    line = (f"engine/raw on {name}: {eng / raw:.3f}x (ratio of medians: {eng:.4g} / {raw:.4g} steps/s); "
            f"per-repeat ratio {paired.ratio:.3f}x, {band}")
    print(line)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"device": name, "recipe": recipe, "model": f"SmallCNN(width={args.width})", "batch": args.batch,
                  "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats, "warm_runs": args.warm_runs,
                  "timing": "CUDA events" if cuda else "host clock", "steps_per_s": runs,
                  "ratio_of_medians": eng / raw, "paired": {"ratio": paired.ratio, "low": paired.low,
                                                             "high": paired.high, "confidence": 0.9},
                  "torch": torch.__version__}
        write_atomic(args.out / "engine_vs_raw.json", json.dumps(record, indent=2) + "\n")
        write_atomic(args.out / "engine_vs_raw.md",
            "| loop | steps/s (median) | runs |\n|---|---|---|\n"
            + "".join(f"| {k} | {summarize(v).median:.4g} | {', '.join(f'{x:.4g}' for x in v)} |\n"
                      for k, v in runs.items()) + f"\n{line}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
