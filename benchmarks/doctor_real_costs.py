"""Is the doctor worth its wait on real scripts? Each script alone vs under ``pitstop doctor``, side by side.

The scripts (``benchmarks/doctor_real_scripts.py`` ``NEW_SCRIPTS``: repository, commit, path,
sha256 of every file) are never checked in: :func:`materialize` writes them from a local
mirror of the repository (``/work/.mirror/<owner>+<name>/repo``, or ``--mirror``) into a
working folder, checks every hash, and writes tiny synthetic data in the format the script
reads. Their third-party imports beyond this project's environment live in ``--deps`` (a
``pip install --no-deps --target DIR ...`` folder, on ``PYTHONPATH`` for both runs).

A pair is the script alone for the doctor's number of optimizer steps (``warmup + steps + 1``
profiled; stopped by a global optimizer step hook, nothing else installed), and ``pitstop doctor
--format json`` on the same arguments; pairs alternate their order (ABBA) so the machine's load
hits both. Reported per pair: both walls (whole process: imports, data, any evaluation the
script does on the way, the steps; the doctor's probes and report too), their ratio, the load
average; and the doctor's findings, probes (rounds, skips), periodic work and notes.

    python benchmarks/doctor_real_costs.py [--pairs 2] [--threads 1] [--deps DIR] [--out FILE] [NAME ...]

``--threads N`` adds a third run to each round: the script alone with ``OMP_NUM_THREADS=N``
(what PIT108's fix does), so the finding's claim is checked side by side too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

#: a script run alone: stopped after N optimizer steps by a global step hook (nothing else installed)
ALONE = """import os, runpy, sys
n, script = int(sys.argv[1]), sys.argv[2]
from torch.optim.optimizer import register_optimizer_step_post_hook
count = [0]
class Stop(BaseException):
    pass
def hook(opt, args, kwargs):
    count[0] += 1
    if count[0] >= n:
        raise Stop()
register_optimizer_step_post_hook(hook)
sys.argv = [script, *sys.argv[3:]]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
except Stop:
    pass
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def materialize(case, work: Path, mirror_root: Path) -> None:
    """Write the case's files from the repository mirror at its commit, hashes checked, then its data."""
    owner, name = case.repo.split("/")
    git = mirror_root / f"{owner}+{name}" / "repo"
    for path, digest in case.files.items():
        dest = work / case.layout.get(path, path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob = subprocess.run(["git", "-C", str(git), "show", f"{case.commit}:{path}"], capture_output=True, check=True).stdout
        dest.write_bytes(blob)
        if _sha(dest) != digest:
            raise SystemExit(f"{case.repo}@{case.commit}:{path}: sha256 {_sha(dest)} != the manifest's {digest}")
    PREPARE[case.data](work)


def _ptb_like(work: Path) -> None:
    """A corpus laid out like Penn Treebank's train.txt: ~887k words of a 10,000-word vocabulary
    (with <eos>), Zipf frequencies, one sentence a line."""
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(9998)] + ["<unk>"]
    words = rng.choices(vocab, [1 / (i + 1) for i in range(len(vocab))], k=887_521)
    words[:len(vocab)] = vocab
    lines, i = [], 0
    while i < len(words):
        n = rng.randint(10, 32)
        lines.append(" " + " ".join(words[i:i + n]) + " ")
        i += n
    (work / "data").mkdir(exist_ok=True)
    (work / "data" / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _tinystories_tok512(work: Path) -> None:
    """Pretokenized shards as tinystories.py writes them for a custom 512-token vocabulary:
    data/tok512/*.bin of uint16 token ids (the first shard is validation)."""
    import numpy as np

    out = work / "data" / "tok512"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(2):
        rng.integers(0, 512, 400_000, dtype=np.uint16).tofile(out / f"data{k:02d}.bin")


PREPARE = {"ptb": _ptb_like, "tok512": _tinystories_tok512, "none": lambda work: None}


def _child_seconds() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def _run(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[float, float, subprocess.CompletedProcess]:
    u0, s0 = _child_seconds()
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    u1, s1 = _child_seconds()
    return wall, (u1 - u0) + (s1 - s0), out


def pair(case, work: Path, env: dict, order: tuple[str, ...], steps: int, warmup: int, timeout: float,
         threads: int | None = None) -> dict:
    """One round: the script alone, under the doctor and (``threads``) alone with
    ``OMP_NUM_THREADS=threads`` (what PIT108's fix would do), in ``order``."""
    total = warmup + steps + 1  # the doctor's warm-up, observed and profiled steps
    alone = [sys.executable, "-c", ALONE, str(total), case.script, *case.args]
    doctor = [sys.executable, "-m", "pitstop", "doctor", "--format", "json", "--steps", str(steps), "--warmup",
              str(warmup), "--timeout", str(int(timeout)), case.script, "--", *case.args]
    got: dict = {"order": list(order), "load_before": os.getloadavg()[0]}
    for which in order:
        run_env = {**env, "OMP_NUM_THREADS": str(threads)} if which == "alone_fixed" else env
        wall, cpu, out = _run(doctor if which == "doctor" else alone, work, run_env, timeout + 60)
        got[which] = {"wall": wall, "cpu": cpu, "exit": out.returncode}
        if which == "doctor":
            got["report"] = json.loads(out.stdout) if out.stdout.strip() else {"error": out.stderr[-3000:]}
        elif out.returncode != 0:
            got["alone"]["stderr"] = out.stderr[-2000:]
    got["ratio"] = got["doctor"]["wall"] / got["alone"]["wall"]
    got["load_after"] = os.getloadavg()[0]
    return got


def summary(case, pairs: list[dict]) -> dict:
    last = pairs[-1]["report"]
    findings = [(f["code"], f["severity"], round(f["impact"]["share"] or 0.0, 3), f["title"])
                for f in last.get("findings", [])]
    probes = {k: (p.get("skipped") or p.get("error") or
                  {"runs": p.get("runs"), "speedup": p.get("speedup"), "interval": p.get("interval"),
                   "settled": p.get("settled"), "unavailable": p.get("unavailable")})
              for k, p in last.get("probes", {}).items()}
    obs = last.get("observations", {})
    return {"case": case.name, "repo": f"{case.repo}@{case.commit[:7]}", "script": case.script, "args": list(case.args),
            "pairs": [{"order": p["order"], "alone_s": round(p["alone"]["wall"], 1), "doctor_s": round(p["doctor"]["wall"], 1),
                       "alone_cpu_s": round(p["alone"]["cpu"], 1), "doctor_cpu_s": round(p["doctor"]["cpu"], 1),
                       "ratio": round(p["ratio"], 2), "load": round(p["load_before"], 1),
                       **({"alone_fixed_s": round(p["alone_fixed"]["wall"], 1),
                           "fixed_speedup": round(p["alone"]["wall"] / p["alone_fixed"]["wall"], 2)}
                          if "alone_fixed" in p else {})} for p in pairs],
            "median_ratio": round(statistics.median(p["ratio"] for p in pairs), 2),
            "step_median_s": (last.get("step_time") or {}).get("median"),
            "breakdown": {k: round(v["share"], 3) for k, v in (last.get("breakdown") or {}).items()},
            "findings": findings, "probes": probes, "periodic": obs.get("periodic"), "cpu": obs.get("cpu"),
            "notes": last.get("notes"), "message": last.get("message")}


def main(argv: list[str] | None = None) -> int:
    from doctor_real_scripts import NEW_SCRIPTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(NEW_SCRIPTS))
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--deps", type=Path, default=Path("/work/corpus/realscripts-deps"))
    ap.add_argument("--work", type=Path, default=Path("/work/corpus/realscripts-work"))
    ap.add_argument("--out", type=Path, default=None, help="write the JSON summary here")
    ap.add_argument("--threads", type=int, default=None,
                    help="also run the script alone with OMP_NUM_THREADS=N in each round (PIT108's fix, side by side)")
    args = ap.parse_args(argv)
    results = []
    for name in args.names:
        case = NEW_SCRIPTS[name]
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        materialize(case, work, args.mirror)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(args.deps)])
        pairs = []
        runs = ["alone", "doctor"] + (["alone_fixed"] if args.threads else [])
        for i in range(args.pairs):
            order = tuple(runs[i % len(runs):] + runs[:i % len(runs)]) if i % 2 == 0 else tuple(reversed(runs))
            pairs.append(pair(case, work, env, order, args.steps, args.warmup, args.timeout, args.threads))
            print(f"{name} pair {i + 1}: alone {pairs[-1]['alone']['wall']:.1f} s, doctor {pairs[-1]['doctor']['wall']:.1f} s "
                  f"({pairs[-1]['ratio']:.2f}x), load {pairs[-1]['load_before']:.1f}", file=sys.stderr, flush=True)
        results.append(summary(case, pairs))
        print(json.dumps(results[-1], indent=1, default=str), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
