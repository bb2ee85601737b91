"""Baseline vs tuned steps/s for each bundled example, measured side by side in one run.

    python benchmarks/tune_examples.py [--examples cnn,gpt,mlp] [--threads 1] [--repeats 5] [--markdown]

For each bundled naive script (``python -m pitstop.examples.X``, run unmodified with its own
default arguments):

1. ``pitstop tune`` searches (script mode: every run a fresh child process under the
   doctor's bootstrap, ``--search-repeats`` interleaved rounds, greedy combination);
2. the winner is **re-measured** against the baseline in ``--repeats`` fresh interleaved
   rounds (ABBA order: baseline, tuned, tuned, baseline, ...), so the printed ratio is not
   the search's own, selection-biased estimate.

Printed per example: baseline and tuned steps/s (median step over all measured steps), the
ratio with a 90% bootstrap interval (``pitstop.stats.ratio_interval``), the median of the
per-round ratios, and what was kept. ``--threads N`` runs every child with
``torch.set_num_threads(N)`` (baseline and tuned alike). Timings from a shared machine are
noisy: re-measure on a quiet one.
"""

from __future__ import annotations

import argparse
import sys
import time

from pitstop.examples import SCRIPTS
from pitstop.stats import quantile, ratio_interval
from pitstop.tune.knob import all_knobs
from pitstop.tune.script import ScriptBackend
from pitstop.tune.search import TuneOptions, search


def measure(name: str, args: argparse.Namespace) -> dict:
    knobs = all_knobs()
    backend = ScriptBackend(module=SCRIPTS[name], threads=args.threads, timeout=args.timeout)
    t0 = time.perf_counter()
    options = TuneOptions(steps=args.steps, warmup=args.warmup, repeats=args.search_repeats, budget=args.budget,
                          timeout=args.timeout, only=tuple(args.only))
    result = search(backend, knobs, options)
    search_s = time.perf_counter() - t0
    from pitstop.tune.report import render_text

    render_text(result, file=sys.stderr)  # the search's own table, for the record
    best = result.best.settings if result.best is not None else ()
    base_times, tuned_times, ratios = [], [], []
    for r in range(args.repeats):  # nothing kept: the "tuned" runs are baseline runs too
        order = [("base", ()), ("tuned", best)]
        meds = {}
        for label, settings in (order if r % 2 == 0 else order[::-1]):
            run = backend.run(settings, knobs, round=r, timeout=args.timeout, steps=args.steps, warmup=args.warmup)
            if not run.ok:
                raise SystemExit(f"{name}: a confirmation run failed: {run.status}: {run.message}")
            (tuned_times if label == "tuned" else base_times).extend(run.step_times)
            meds[label] = run.median_step
        ratios.append(meds["base"] / meds["tuned"])
    iv = ratio_interval(base_times, tuned_times, confidence=0.9)
    return {"example": name, "base": 1 / quantile(base_times, 0.5), "tuned": 1 / quantile(tuned_times, 0.5),
            "ratio": iv.ratio, "low": iv.low, "high": iv.high, "round_ratio": quantile(ratios, 0.5),
            "kept": " + ".join(s.label for s in best) or "nothing (baseline)", "search_s": search_s,
            "search_ratio": result.best.speedup["ratio"] if result.best is not None and result.best.speedup else 1.0,
            "not_applicable": sorted({t.settings[0].code for t in result.trials if t.status == "not_applicable"}),
            "noise": result.noise}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default="cnn,gpt,mlp")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--search-repeats", type=int, default=3)
    p.add_argument("--repeats", type=int, default=6, help="confirmation rounds (baseline and tuned once each)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--budget", type=float, default=None, help="seconds per example's search")
    p.add_argument("--only", type=lambda s: [c for c in s.split(",") if c], default=[],
                   help="knobs to search (default: all; PIT601 compile is slow on a small CPU)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    rows = []
    for name in args.examples.split(","):
        print(f"[{name}] searching ...", file=sys.stderr, flush=True)
        rows.append(measure(name, args))
        r = rows[-1]
        print(f"[{name}] {r['base']:.2f} -> {r['tuned']:.2f} steps/s, {r['ratio']:.2f}x", file=sys.stderr, flush=True)
    if args.markdown:
        print("| example | baseline steps/s | tuned steps/s | tuned / baseline [90% CI] | per-round ratio (median) "
              "| kept | search |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['example']} | {r['base']:.2f} | {r['tuned']:.2f} | {r['ratio']:.2f}x [{r['low']:.2f}, "
                  f"{r['high']:.2f}] | {r['round_ratio']:.2f}x | {r['kept']} | {r['search_s']:.0f} s, noise "
                  f"{r['noise']:.0%} |")
    else:
        for r in rows:
            print(f"{r['example']:4s} baseline {r['base']:7.2f} steps/s  tuned {r['tuned']:7.2f} steps/s  "
                  f"ratio {r['ratio']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]  per-round {r['round_ratio']:.2f}x  "
                  f"kept: {r['kept']}  (search {r['search_s']:.0f} s, search's own estimate {r['search_ratio']:.2f}x, "
                  f"noise floor {r['noise']:.0%})")


if __name__ == "__main__":
    main()
