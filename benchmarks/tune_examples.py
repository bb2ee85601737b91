"""pitstop tune on the bundled naive scripts: search time, kept set, the winner re-measured in
fresh pairs, and the kept trick's snippet pasted into the script, measured against the tuner.

    python benchmarks/tune_examples.py [--examples cnn,gpt] [--pairs 6] [--only CODES] [--threads N] [--busy N]

For each bundled naive script (``python -m pitstop.examples.X``, run unmodified with its own
default arguments):

1. ``pitstop tune``'s default search (script mode, warm worker, paired adaptive rounds,
   greedy combination); its wall time and where the time went;
2. the winner **re-measured** against the baseline in ``--pairs`` fresh pairs (each tuned run
   between two baseline runs), so the printed ratio is not the search's own, selection-biased
   estimate;
3. **the snippet, pasted**: the kept bf16 autocast trick's snippet (the tuner's own text, see
   ``PASTES``) written into a copy of the script, that copy run unmodified against the original
   in ``--pairs`` fresh pairs: its speed-up must fall within the interval the tuner reported for
   the trick (what the tuner measures is what the user gets).

Printed per example: search seconds, the time split, the machine's load, the kept set, the
search's estimate, the fresh re-measurement and the pasted check. ``--busy N`` starts N
pure-Python spin processes before the search and stops them at the end (a controlled
competing load: on a 2-core machine, two of them take both cores' worth of time slices). Timings from a shared
machine are noisy: re-measure on a quiet one.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pitstop.examples import SCRIPTS
from pitstop.paired import Pair, decide
from pitstop.tune.knob import all_knobs
from pitstop.tune.options import TuneOptions
from pitstop.report.tune_terminal import render_text
from pitstop.tune.script import ScriptBackend
from pitstop.tune.protocol import search

#: The bf16 snippet of PIT301 (``AutocastKnob.snippet``) pasted into each example: (line in the
#: example, the lines that replace it). Indentation is the example's.
PASTES = {
    "cnn": ("            out = model(x)  # PIT301: fp32 on a CPU/GPU that is faster in bf16\n"
            "            loss = F.cross_entropy(out, y)\n",
            "            with torch.autocast(device_type=\"cpu\", dtype=torch.bfloat16):\n"
            "                out = model(x)                  # the forward only\n"
            "            loss = F.cross_entropy(out.float(), y)  # the loss in fp32, as pitstop tune measured it\n"),
    "gpt": ("            logits = model(idx)\n",
            "            with torch.autocast(device_type=\"cpu\", dtype=torch.bfloat16):\n"
            "                logits = model(idx)             # the forward only\n"
            "            logits = logits.float()           # the loss in fp32, as pitstop tune measured it\n"),
}


def _child_cpu() -> float:
    """CPU seconds of this process's reaped children (the warm worker and its runs): what the
    search cost whatever the load (on a quiet machine its wall time is about this divided by
    the cores the runs keep busy)."""
    t = os.times()
    return t.children_user + t.children_system


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f} (1-min load average, {os.cpu_count()} cores)"
    except OSError:
        return "unknown"


def _pairs(a: ScriptBackend, b: ScriptBackend, a_settings, b_settings, knobs, n: int, args) -> list[Pair]:
    """``n`` pairs, each b-run between two a-runs (a: the reference)."""
    def one(backend, settings):
        run = backend.run(settings, knobs, timeout=args.timeout, steps=args.steps, warmup=args.warmup)
        if not run.ok:
            raise SystemExit(f"a re-measurement run failed: {run.status}: {run.message}")
        return run.sample()

    from pitstop.paired import Sample

    before, pairs = one(a, a_settings), []
    for _ in range(n):
        mid = one(b, b_settings)
        after = one(a, a_settings)
        pairs.append(Pair(Sample.mean([before, after]), mid))
        before = after
    return pairs


def _pasted_script(name: str, tmp: Path) -> Path | None:
    if name not in PASTES:
        return None
    src = Path(importlib.util.find_spec(SCRIPTS[name]).origin).read_text(encoding="utf-8")
    old, new = PASTES[name]
    if old not in src:
        raise SystemExit(f"{name}: the example changed; update PASTES in {__file__}")
    path = tmp / f"{name}_pasted_bf16.py"
    path.write_text(src.replace(old, new), encoding="utf-8")
    return path


def measure(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    knobs = all_knobs()
    load_before = _load()
    backend = ScriptBackend(module=SCRIPTS[name], threads=args.threads, timeout=args.timeout)
    t0, c0 = time.perf_counter(), _child_cpu()
    options = TuneOptions(steps=args.steps, warmup=args.warmup, budget=args.budget, timeout=args.timeout,
                          only=tuple(args.only))
    result = search(backend, knobs, options)
    search_s = time.perf_counter() - t0
    backend.close()  # reaps the worker: its CPU time (and its runs') is counted now
    search_cpu = _child_cpu() - c0
    ctx, backend = backend.ctx, ScriptBackend(module=SCRIPTS[name], threads=args.threads, timeout=args.timeout)
    backend.ctx = ctx  # the survey's context, for the knobs' child settings
    render_text(result, file=sys.stderr)  # the search's own report, for the record
    best = result.best.settings if result.best is not None else ()
    row = {"example": name, "search_s": search_s, "search_cpu": search_cpu, "time": result.time, "load": f"{load_before} -> {_load()}",
           "kept": sorted(t.name for t in result.trials if t.status == "kept"),
           "best": " + ".join(s.label for s in best) or "nothing (baseline)",
           "search_speed": result.best.speed if result.best is not None else None}
    if best:
        row["fresh"] = decide(_pairs(backend, backend, (), best, knobs, args.pairs, args))
    bf16 = next((t for t in result.trials if t.settings and t.settings[0].knob == "autocast"), None)
    pasted = _pasted_script(name, tmp)
    if pasted is not None and bf16 is not None and bf16.speed is not None:
        copy = ScriptBackend(script=str(pasted), threads=args.threads, timeout=args.timeout)
        try:
            row["pasted"] = decide(_pairs(backend, copy, (), (), knobs, args.pairs, args))
        finally:
            copy.close()
        row["tuner_bf16"] = bf16.speed
        row["bf16_status"] = bf16.status
    backend.close()
    return row


def _iv(d) -> str:
    return f"{d.ratio:.2f}x [{d.low:.2f}, {d.high:.2f}] ({d.pairs} pairs, {d.measure.name})" if d else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default="cnn,gpt")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--pairs", type=int, default=6, help="fresh pairs for the re-measurement and the pasted check")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--budget", type=float, default=None, help="seconds per example's search")
    p.add_argument("--only", type=lambda s: [c for c in s.split(",") if c], default=[],
                   help="knobs to search (default: all)")
    p.add_argument("--busy", type=int, default=0, help="pure-Python spin processes competing while measuring")
    args = p.parse_args()
    rows = []
    spin = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy)]
    try:
        with tempfile.TemporaryDirectory(prefix="pitstop-bench-tune-") as tmp:
            for name in args.examples.split(","):
                print(f"[{name}] searching{f' with {args.busy} busy processes' if busy else ''} ...", file=sys.stderr,
                      flush=True)
                rows.append(measure(name, args, Path(tmp)))
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    for r in rows:
        t = r["time"]
        print(f"{r['example']}: search {r['search_s']:.0f} s wall, {r['search_cpu']:.0f} CPU s (survey {t.survey:.0f} s; {t.runs} runs: set-up/shutdown "
              f"{t.setup + t.other:.0f} s, warm-up {t.warmup:.0f} s, measured {t.measured:.0f} s); load {r['load']}")
        print(f"  kept: {', '.join(r['kept']) or 'nothing'}; best: {r['best']}, search's estimate "
              f"{_iv(r['search_speed'])}")
        if "fresh" in r:
            print(f"  best re-measured in fresh pairs: {_iv(r['fresh'])} -> {r['fresh'].status}")
        if "pasted" in r:
            tb, ps = r["tuner_bf16"], r["pasted"]
            inside = tb.low <= ps.ratio <= tb.high
            print(f"  bf16 snippet pasted into the script: {_iv(ps)} vs the tuner's bf16 {_iv(tb)} "
                  f"({r['bf16_status']}): {'within' if inside else 'OUTSIDE'} the tuner's interval")


if __name__ == "__main__":
    main()
