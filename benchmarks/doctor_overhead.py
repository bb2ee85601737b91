"""Overhead of ``pitstop doctor``'s instrumentation on the bundled examples.

Two measurements, both printed as ratios of medians with a 90% bootstrap interval
(target: <= 5% overhead):

1. **In-process A/B** (everything the doctor costs the script, bookkeeping between steps included): one process builds the example's model,
   DataLoader and optimizer (the naive scripts' settings, from ``pitstop.examples``) and
   runs its training step in alternating blocks, plain and with the full instrumentation
   installed (module hooks, DataLoader timing, sync patches, saved-tensor hooks, memory
   samples; no probes), block after block, in ABBA order. Alternating short blocks in one process is what
   keeps a noisy shared machine from favouring either side. The first step of each block
   is dropped (install/uninstall and the one graph census land there). Wall time and the
   process's CPU time are both reported; with ``--threads 1`` CPU time measures the work
   done, which other processes on a busy machine barely disturb.
2. **Paired** (``--pairs``, the doctor's own measure at scale): one instrumentation installed,
   its steps alternating one by one between hooks on and hooks off (the quiet state of the
   doctor's bare steps, which keep only the step boundaries); what distorts the step times the
   doctor reports.
3. ``--child``: the real ``pitstop doctor`` path, runs of the naive script in a child
   process in ``light`` mode (step hooks only) vs ``full`` mode, interleaved, comparing the
   observed steps' wall and CPU times. Much noisier (separate processes).

``mlp-compiled`` is the MLP's step with ``torch.compile(model)`` (default mode, Inductor):
compiled once before timing, and each mode run once untimed first (dynamo guards on the global
forward-hook dicts: the first block with the hooks installed compiles a second graph, kept
for the later blocks). The doctor itself measures the same thing on every full run (its last
observed steps against the bare steps alternating with them, ``Observations.overhead``).

``--sampler`` times the stack sampler alone the same way (plain blocks against blocks with only
its thread running: the window open throughout, and the window closed while the step computes,
as in the doctor's observed steps).

    python benchmarks/doctor_overhead.py [--examples cnn gpt mlp mlp-compiled] [--blocks 8] [--block 5] [--child] [--sampler]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from pitstop.stats import quantile, ratio_interval


def _workload(name: str):
    from pitstop.examples import data, models

    torch.manual_seed(0)
    if name == "cnn":
        model = models.make_cnn(naive=True)
        loader = DataLoader(data.SyntheticImages(n=4096, work=6, seed=0), batch_size=64, shuffle=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=False)
        loss_fn = F.cross_entropy
    elif name == "gpt":
        model = models.make_gpt(naive=True)
        loader = DataLoader(data.SyntheticTokens(n=2048, seed=0), batch_size=16, shuffle=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

        def loss_fn(logits, y):
            return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    elif name in ("mlp", "mlp-compiled"):
        from torch.utils.data import TensorDataset

        table = data.SyntheticTabular(n=8192, seed=0)
        model = models.make_mlp(naive=True)
        if name == "mlp-compiled":
            model = torch.compile(model)
        loader = DataLoader(TensorDataset(torch.from_numpy(table.x), torch.from_numpy(table.y)), batch_size=128,
                            shuffle=True)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        loss_fn = F.cross_entropy
    else:
        raise SystemExit(f"unknown example {name!r}")
    state = {"it": iter(loader)}

    def step() -> None:
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        f"{loss.item():.4f}"  # the naive scripts' per-step sync

    return step


def in_process(name: str, blocks: int, block: int) -> None:
    from pitstop.doctor.record.instrument import Instrumentation

    step = _workload(name)
    for _ in range(3):
        step()
    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in ("plain", "full") for c in ("wall", "cpu")}
    for b in range(-1, blocks):  # block -1: each mode once, untimed (a compiled model compiles for each)
        for mode in (("plain", "full") if b % 2 == 0 else ("full", "plain")):  # ABBA: no order bias
            inst = Instrumentation(10**9, 0, mode="full", stop=False).install() if mode == "full" else None
            try:
                for i in range(block + 1):
                    t0, c0 = time.perf_counter(), time.process_time()
                    step()
                    if i and b >= 0:  # the first step of a block carries install and the graph census
                        times[(mode, "wall")].append(time.perf_counter() - t0)
                        times[(mode, "cpu")].append(time.process_time() - c0)
            finally:
                if inst is not None:
                    inst.uninstall()
    for clock in ("wall", "cpu"):
        _print(name, f"in-proc {clock}", times[("plain", clock)], times[("full", clock)])


def sampler_only(name: str, blocks: int, block: int) -> None:
    """The stack sampler alone (``--sampler``): blocks of plain steps against blocks with only
    the doctor's :class:`StackSampler` running, in one process, the modes rotated block by block.
    Two sampler modes: ``open``, the window open throughout (a stack read at every tick: the
    most it can cost), and ``windows``, as in the doctor's observed steps (the window closed
    while the step computes, open between steps: a free-running clock ticks through the step, a
    parked one does not). The whole instrumentation's cost (``in-proc``) includes it."""
    from pitstop.doctor.record.stacks import StackSampler

    step = _workload(name)
    for _ in range(3):
        step()
    modes = ("plain", "open", "windows")
    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in modes for c in ("wall", "cpu")}
    ticks = {m: 0 for m in modes}
    for b in range(blocks):
        for mode in modes[b % 3:] + modes[:b % 3]:
            sampler = StackSampler() if mode != "plain" else None
            if sampler is not None:
                sampler.start()
                sampler.open()
            try:
                for i in range(block + 1):
                    t0, c0 = time.perf_counter(), time.process_time()  # process CPU: the thread's too
                    if mode == "windows":
                        sampler.close()
                    step()
                    if mode == "windows":
                        sampler.open()
                    if i:
                        times[(mode, "wall")].append(time.perf_counter() - t0)
                        times[(mode, "cpu")].append(time.process_time() - c0)
            finally:
                if sampler is not None:
                    sampler.stop()
                    sampler.join(5.0)
                    ticks[mode] += sampler.ticks
    for mode in ("open", "windows"):
        for clock in ("wall", "cpu"):
            _print(name, f"{mode} {clock}", times[("plain", clock)], times[(mode, clock)])
        print(f"      ({ticks[mode]} ticks in {len(times[(mode, 'wall')])} steps)", flush=True)


def paired(name: str, pairs: int) -> None:
    """The doctor's own measure, at scale: one instrumentation installed, its steps alternating
    between observed (hooks on) and bare (``StepLog.quiet``: hooks off, as the doctor's bare
    steps), one step each, ``pairs`` times, timed as the doctor times its steps (its step
    records: from one step boundary to the next, its bookkeeping between steps left out)."""
    from pitstop.doctor.record.instrument import Instrumentation

    step = _workload(name)
    for _ in range(3):
        step()
    inst = Instrumentation(10**9, 0, mode="full", stop=False).install()
    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in ("bare", "hooks") for c in ("wall", "cpu")}
    try:
        for i in range(2 * pairs + 8):
            mode = "bare" if i % 2 else "hooks"
            if mode == "bare":  # as the doctor's plan does for its bare steps
                inst.log.quiet = True
                inst._quiet(True)
            step()
            rec = inst.records[-1]
            if i >= 8:  # the first steps carry the first graph census and the activation counting
                times[(mode, "wall")].append(rec.wall)
                times[(mode, "cpu")].append(rec.cpu)
    finally:
        inst.uninstall()
    for clock in ("wall", "cpu"):
        _print(name, f"paired {clock}", times[("bare", clock)], times[("hooks", clock)])


def child(name: str, repeats: int, steps: int) -> None:
    from pitstop.doctor import RunSpec, run_script

    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in ("light", "full") for c in ("wall", "cpu")}
    for _ in range(repeats):
        for mode in ("light", "full"):
            spec = RunSpec(module=f"pitstop.examples.{name}", args=("--eval-every", "100000"), steps=steps,
                           warmup=3, mode=mode, probes=False, stdout="devnull")
            result = run_script(spec)
            if result.status != "stopped":
                raise SystemExit(f"{name} {mode}: {result.status}: {result.message}")
            times[(mode, "wall")] += [s.wall for s in result.observed]
            times[(mode, "cpu")] += [s.cpu for s in result.observed]
    for clock in ("wall", "cpu"):
        _print(name, f"child {clock}", times[("light", clock)], times[("full", clock)])


def _print(name: str, how: str, base: list[float], inst: list[float]) -> None:
    b, f = quantile(base, 0.5), quantile(inst, 0.5)
    ri = ratio_interval(inst, base)  # median(instrumented) / median(baseline)
    print(f"{name:5} {how:12} {b * 1e3:10.2f} {f * 1e3:10.2f} {100 * (f / b - 1):+8.1f}%  "
          f"[{100 * (ri.low - 1):+.1f}%, {100 * (ri.high - 1):+.1f}%]  {len(inst)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", default=["cnn", "gpt", "mlp"])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--block", type=int, default=5, help="steps per block (in-process)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (1 makes CPU time a clean work measure on a busy machine)")
    parser.add_argument("--pairs", type=int, default=40,
                        help="pairs of steps alternating hooks on and off in one instrumentation (the doctor's "
                             "own measure; 0: skip; x5 for the MLPs)")
    parser.add_argument("--child", action="store_true", help="also compare light vs full child runs")
    parser.add_argument("--sampler", action="store_true",
                        help="also time the stack sampler alone against plain steps (in-process, ABBA)")
    parser.add_argument("--repeats", type=int, default=3, help="child runs per mode (--child)")
    parser.add_argument("--steps", type=int, default=10, help="observed steps per child run (--child)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'ex':5} {'how':12} {'base ms':>10} {'instr ms':>10} {'overhead':>9}  90% interval      steps")
    for name in args.examples:
        scale = 5 if name.startswith("mlp") else 1
        in_process(name, args.blocks, args.block * scale)
        if args.sampler:
            sampler_only(name, args.blocks, args.block * scale)
        if args.pairs:
            paired(name, args.pairs * scale)
        if args.child and name != "mlp-compiled":
            child(name, args.repeats, args.steps * scale)


if __name__ == "__main__":
    main()
