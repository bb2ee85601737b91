"""pitstop tune, two versions side by side: the same searches run by an old and a new source tree,
interleaved (old, new, new, old per round), their wall time, CPU time and decisions.

    python benchmarks/tune_ab.py --old /work/main/src [--new src] [--examples cnn,gpt] [--rounds 1]
                                 [--convnet-budget 90] [--out DIR]

Each search is ``python -m pitstop tune ... --format json`` in a fresh process whose ``PYTHONPATH``
puts one tree's ``src`` first (its warm worker and runs inherit it), so the two versions never share
a process. Searches:

- each bundled example of ``--examples`` (``-m pitstop.examples.X``) at the default budget (none),
  as ``benchmarks/tune_examples.py`` runs them;
- with ``--convnet-budget SECONDS``: a small conv net trained in fp32 on in-memory data
  (``CONVNET``, written to a temporary folder), ``--budget SECONDS``: the issue-41 case, where the
  paying trick (channels_last on that CPU) must be kept inside the budget.

Printed per search: seconds, CPU seconds of the process and its children, runs, the kept tricks,
the best recipe and its claim; per case, new/old time ratios of each interleaved pair and their
geometric mean. ``--out DIR`` keeps every JSON report. Timings on a shared machine are noisy: only
the interleaved pairs are compared, never runs made at different times.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONVNET = '''"""A small conv net trained in fp32 on in-memory data (written by benchmarks/tune_ab.py)."""
import torch
from torch import nn
from torch.nn import functional as F


def main():
    torch.manual_seed(0)
    images, labels = torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,))
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(1000):
        order = torch.randperm(len(images))
        for i in range(0, len(images), 32):
            idx = order[i:i + 32]
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def search(src: Path, target: list[str], extra: list[str], cwd: Path, out: Path | None, tag: str) -> dict:
    """One ``pitstop tune`` search by the tree ``src``: its time and decisions."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "pitstop", "tune", *target, "--format", "json", "--progress", "off", *extra]
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    took, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{tag}: pitstop tune failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if out is not None:
        (out / f"{tag}.json").write_text(proc.stdout, encoding="utf-8")
    d = json.loads(proc.stdout)
    best = d["best"]
    return {"tag": tag, "seconds": took, "cpu": cpu, "runs": d["time"]["runs"],
            "kept": sorted(t["name"] for t in d["trials"] if t["status"] == "kept"),
            "best": " + ".join(k["label"] for k in best["knobs"]) or "baseline",
            "claim": best["speedup"], "confirmed": any(c["status"] == "confirmed" for c in d["combination"]),
            "exhausted": d["budget"].get("exhausted")}


def _claim(r: dict) -> str:
    c = r["claim"]
    return f"{c['ratio']:.2f}x [{c['low']:.2f}, {c['high']:.2f}]" if c else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="the old tree's src folder (e.g. /work/main/src)")
    p.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    p.add_argument("--examples", default="cnn,gpt", help="bundled examples searched at the default budget ('' none)")
    p.add_argument("--rounds", type=int, default=1, help="old, new, new, old per round")
    p.add_argument("--convnet-budget", type=float, default=None, help="also the small conv net under this --budget")
    p.add_argument("--convnet-only", default=None, metavar="CODES",
                   help="the conv net's --only (e.g. PIT104,PIT601,PIT101: as on a CPU where bf16 does not pay)")
    p.add_argument("--out", type=Path, default=None, help="keep every search's JSON report here")
    args = p.parse_args()
    from pitstop.examples import SCRIPTS
    from pitstop.machine import cpu_features

    cases = [(name, ["-m", SCRIPTS[name]], []) for name in args.examples.split(",") if name]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[tuple[str, dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-tune-ab-") as tmp:
        if args.convnet_budget is not None:
            script = Path(tmp) / "convnet_train.py"
            script.write_text(CONVNET, encoding="utf-8")
            only = ["--only", args.convnet_only] if args.convnet_only else []
            cases.append((f"convnet-budget-{args.convnet_budget:g}" + ("-only" if only else ""), [str(script)],
                          ["--budget", f"{args.convnet_budget:g}", *only]))
        print(f"CPU: {cpu_features().model}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}", flush=True)
        for rnd in range(args.rounds):
            for name, target, extra in cases:
                for k, (which, src) in enumerate((("old", args.old), ("new", args.new), ("new", args.new),
                                                  ("old", args.old))):
                    tag = f"{name}-r{rnd}-{k}-{which}"
                    r = search(src.resolve(), target, extra, Path(tmp), args.out, tag)
                    rows.setdefault(name, []).append((which, r))
                    print(f"{tag}: {r['seconds']:.0f} s, {r['cpu']:.0f} CPU s, {r['runs']} runs; kept "
                          f"{', '.join(r['kept']) or 'nothing'}; best {r['best']} {_claim(r)}"
                          f"{' (confirmed)' if r['confirmed'] else ''}{'; budget exhausted' if r['exhausted'] else ''};"
                          f" load {os.getloadavg()[0]:.1f}", flush=True)
    for name, rs in rows.items():
        ratios = []
        for i in range(0, len(rs), 4):  # old new new old: the pairs (old0, new1), (new2, old3)
            block = rs[i:i + 4]
            ratios += [block[1][1]["seconds"] / block[0][1]["seconds"], block[2][1]["seconds"] / block[3][1]["seconds"]]
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        old = [r["seconds"] for w, r in rs if w == "old"]
        new = [r["seconds"] for w, r in rs if w == "new"]
        print(f"{name}: old {', '.join(f'{s:.0f}' for s in old)} s; new {', '.join(f'{s:.0f}' for s in new)} s; "
              f"new/old per interleaved pair {', '.join(f'{x:.2f}' for x in ratios)}; geometric mean {gm:.2f}")


if __name__ == "__main__":
    main()
