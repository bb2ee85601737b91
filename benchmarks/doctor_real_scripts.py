"""pitstop doctor on real training scripts, run unchanged, checked against their own numbers.

The scripts come from the lint corpus, built outside the repository from pinned commits by
``benchmarks/lint_corpus_build.py`` (tests/lint_corpus/MANIFEST.toml: repository, commit, sha256;
makemore is there too); nothing is fetched at run time. Each case copies its files into a fresh
working directory, writes tiny synthetic data in the format the script reads (what
nanoGPT's ``data/shakespeare_char/prepare.py`` writes, a word corpus laid out like
wikitext-2, a text file for chargpt, a names file for makemore), runs

    pitstop doctor --format json --steps N --warmup W SCRIPT -- <tiny config>

on CPU and compares the doctor's batch size, samples per optimizer step, step times and
phases with what the script itself prints (its own step timer, step by step, and its
configured batch).

    python benchmarks/doctor_real_scripts.py [nanogpt wlm-lstm wlm-transformer chargpt makemore]

prints one block per case and exits non-zero when a check fails. ``tests/
test_doctor_real_scripts.py`` runs two of the cases the same way (slow).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lint_corpus_build  # noqa: E402  (where the corpus lives: --out, $PITSTOP_LINT_CORPUS or the cache)
STEPS, WARMUP = 10, 2


@dataclass(frozen=True)
class Case:
    name: str
    files: str                     # folder of the built corpus, copied into the working directory (at ``into``)
    script: str                    # path of the script inside the working directory
    args: tuple[str, ...]
    batch: int                     # the script's own batch (from its configuration)
    samples_per_step: int          # micro-batches x batch
    batch_dim: int
    time_pattern: str              # regex with groups (step, ms) or (ms, step): the script's own timer
    offset: int = 0                # doctor record index of a printed step number: step + offset
    span: int = 1                  # records the printed time covers (ending at that index)
    step_boundary: str = "optimizer.step"
    pythonpath: str = ""           # extra sys.path entry inside the working directory
    wrong_ways: tuple[str, ...] = field(default=())  # fix texts that would point the wrong way
    into: str = ""                 # subfolder of the working directory the files go to


def _words(rng: random.Random, n: int) -> str:
    vocab = [f"w{i}" for i in range(60)]
    lines, line = [], []
    for _ in range(n):
        line.append(rng.choice(vocab))
        if len(line) >= 12:
            lines.append(" " + " ".join(line) + " ")
            line = []
    return "\n".join(lines) + "\n"


def _prepare(case: Case, work: Path) -> None:
    rng = random.Random(0)
    if case.name == "nanogpt":  # like data/shakespeare_char/prepare.py: train.bin, val.bin, meta.pkl
        import numpy as np

        chars = sorted(set("abcdefghijklmnopqrstuvwxyz ,.\n"))
        data = work / "data" / "shakespeare_char"
        data.mkdir(parents=True, exist_ok=True)  # the corpus copy has its prepare.py there
        ids = np.array([rng.randrange(len(chars)) for _ in range(60_000)], dtype=np.uint16)
        ids[:54_000].tofile(data / "train.bin")
        ids[54_000:].tofile(data / "val.bin")
        with open(data / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                         "stoi": {c: i for i, c in enumerate(chars)}}, f)
    elif case.name.startswith("wlm"):  # wikitext-2 layout: train/valid/test.txt
        data = work / "data"
        data.mkdir(exist_ok=True)
        for split, n in (("train", 40_000), ("valid", 2_000), ("test", 2_000)):
            (data / f"{split}.txt").write_text(_words(rng, n), encoding="utf-8")
    elif case.name == "chargpt":
        (work / "input.txt").write_text("".join(rng.choice("abcdefgh ijOGod,!\n") for _ in range(40_000)), encoding="utf-8")
    elif case.name == "makemore":
        names = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 9))) for _ in range(4000)]
        (work / "names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")


CASES = {c.name: c for c in (
    Case("nanogpt", "nanoGPT", "train.py",
         ("--dataset=shakespeare_char", "--device=cpu", "--compile=False", "--dtype=float32", "--batch_size=8",
          "--block_size=32", "--n_layer=2", "--n_head=2", "--n_embd=64", "--dropout=0.0",
          "--gradient_accumulation_steps=2", "--max_iters=100000", "--eval_interval=100000", "--eval_iters=1",
          "--log_interval=1", "--wandb_log=False"),
         batch=8, samples_per_step=16, batch_dim=0, time_pattern=r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms"),
    Case("wlm-lstm", "pytorch-examples/word_language_model", "word_language_model/main.py",
         ("--data", "data", "--model", "LSTM", "--emsize", "32", "--nhid", "32", "--nlayers", "1", "--epochs", "1",
          "--log-interval", "2", "--save", "model.pt"),
         batch=20, samples_per_step=20, batch_dim=1, step_boundary="backward", offset=-1, span=2, into="word_language_model",
         time_pattern=r"\|\s+(\d+)/\s*\d+ batches .*ms/batch\s+([\d.]+)"),
    Case("wlm-transformer", "pytorch-examples/word_language_model", "word_language_model/main.py",
         ("--data", "data", "--model", "Transformer", "--emsize", "32", "--nhid", "32", "--nlayers", "1",
          "--nhead", "2", "--epochs", "1", "--log-interval", "2", "--save", "model.pt"),
         batch=20, samples_per_step=20, batch_dim=1, step_boundary="backward", offset=-1, span=2, into="word_language_model",
         time_pattern=r"\|\s+(\d+)/\s*\d+ batches .*ms/batch\s+([\d.]+)"),
    Case("chargpt", "minGPT", "projects/chargpt/chargpt.py",
         ("--model.model_type=None", "--model.n_layer=2", "--model.n_head=2", "--model.n_embd=64",
          "--data.block_size=32", "--trainer.batch_size=16", "--trainer.max_iters=100000"),
         batch=16, samples_per_step=16, batch_dim=0, pythonpath=".", offset=-1,
         time_pattern=r"^iter_dt ([\d.]+)ms; iter (\d+):", wrong_ways=("more workers",)),
    Case("makemore", "makemore", "makemore.py",
         ("-i", "names.txt", "-o", "out", "--type", "transformer", "--n-layer", "2", "--n-head", "2",
          "--n-embd", "32", "--n-embd2", "32", "--batch-size", "32", "--max-steps", "100000"),
         batch=32, samples_per_step=32, batch_dim=0,
         time_pattern=r"^step (\d+) \| loss [\d.]+ \| step time ([\d.]+)ms", wrong_ways=("more workers",)),
)}


def _own_times(case: Case, text: str) -> list[tuple[int, float]]:
    """(step, ms) of every per-step time the script printed."""
    out = []
    for line in text.splitlines():
        m = re.search(case.time_pattern, line.strip())
        if m:
            a, b = m.groups()
            out.append((int(b), float(a)) if case.name == "chargpt" else (int(a), float(b)))
    return out


def _matched(case: Case, own: list[tuple[int, float]], records: list[dict],
             census: list[int]) -> list[tuple[float, float]]:
    """(script ms, doctor ms) for the same steps: each printed time next to the mean wall
    time of the doctor's records that cover the same optimizer steps. Steps at whose end
    the doctor counted the live autograd graph (``census``: up to seconds on a busy
    machine, which the doctor leaves out of its own step times but which lands inside the
    script's timer) are left out."""
    walls = {r["index"]: r["wall"] for r in records}
    skip = {i - 1 for i in census}  # the census runs after the record with index i - 1
    pairs = []
    for step, ms in own:
        idx = [step + case.offset - k for k in range(case.span)]
        if ms > 0 and step > 0 and all(i in walls and i not in skip for i in idx):
            pairs.append((ms, 1e3 * sum(walls[i] for i in idx) / len(idx)))
    return pairs


def run_case(case: Case, keep: Path | None = None, probes: bool = False, timeout: float = 480,
             band: tuple[float, float] = (0.8, 1.25)) -> dict:
    """Run one case; returns the doctor's numbers, the script's own, and the failed checks.

    ``band``: the accepted range of the doctor's step time over the script's own for the same steps.
    """
    work = Path(tempfile.mkdtemp(prefix=f"pitstop-real-{case.name}-"))
    try:
        shutil.copytree(lint_corpus_build.corpus_dir() / case.files, work / case.into, dirs_exist_ok=True)
        _prepare(case, work)
        env = dict(os.environ)
        paths = [str(ROOT / "src")] + ([str(work / case.pythonpath)] if case.pythonpath else [])
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cmd = [sys.executable, "-m", "pitstop", "doctor", "--format", "json", "--steps", str(STEPS),
               "--warmup", str(WARMUP), "--timeout", "300"] + ([] if probes else ["--no-probes"]) + \
              [case.script, "--", *case.args]
        out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        if keep is not None:
            (keep / f"{case.name}.stderr.txt").write_text(out.stderr, encoding="utf-8")
        if not out.stdout.strip():
            return {"case": case.name, "failed": [f"no report (exit {out.returncode}): {out.stderr[-2000:]}"]}
        d = json.loads(out.stdout)
        return _compare(case, d, out.stderr, band)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(case: Case, d: dict, script_output: str, band: tuple[float, float] = (0.8, 1.25)) -> dict:
    tp, b = d["throughput"], d["observations"].get("batch") or {}
    br = {k: v["share"] for k, v in d["breakdown"].items()}
    pairs = _matched(case, _own_times(case, script_output), d["steps"]["records"],
                     (d["observations"].get("graph") or {}).get("steps") or [])
    own_ms = statistics.median(a for a, _ in pairs) if pairs else None
    ratio = statistics.median(b / a for a, b in pairs) if pairs else None
    doc_ms = 1e3 * d["step_time"]["median"] if d.get("step_time") else None
    failed = []
    if d["outcome"] != "diagnosed":
        failed.append(f"outcome {d['outcome']}: {d['message']}")
    if tp.get("batch_size") != case.batch:
        failed.append(f"batch size {tp.get('batch_size')} != the script's {case.batch}")
    if b.get("dim") != case.batch_dim:
        failed.append(f"batch dim {b.get('dim')} != {case.batch_dim}")
    if tp.get("samples_per_step") != case.samples_per_step:
        failed.append(f"samples per step {tp.get('samples_per_step')} != {case.samples_per_step}")
    if tp.get("step_boundary") != case.step_boundary:
        failed.append(f"step boundary {tp.get('step_boundary')} != {case.step_boundary}")
    if ratio is None:
        failed.append("the script printed no step time the doctor also measured")
    elif not band[0] <= ratio <= band[1]:
        failed.append(f"the doctor's step times are {ratio:.2f}x the script's own for the same steps")
    if br and br.get("forward", 0) + br.get("backward", 0) < 0.3:
        failed.append(f"forward+backward only {br.get('forward', 0) + br.get('backward', 0):.0%} of the step")
    for f in d["findings"]:
        for wrong in case.wrong_ways:
            if wrong in f["fix"].lower():
                failed.append(f"{f['code']} points the wrong way: {f['fix']}")
    return {"case": case.name, "batch": tp.get("batch_size"), "batch_dim": b.get("dim"), "how": b.get("how"),
            "samples_per_step": tp.get("samples_per_step"), "doctor_ms": doc_ms, "script_ms": own_ms,
            "same_steps": [(round(a, 1), round(b, 1)) for a, b in pairs], "same_step_ratio": ratio,
            "doctor_samples_per_s": tp.get("samples_per_s"), "tokens_per_s": tp.get("tokens_per_s"),
            "script_samples_per_s": case.samples_per_step / own_ms * 1e3 if own_ms else None,
            "breakdown": br, "findings": [(f["code"], f["severity"], f["title"]) for f in d["findings"]],
            "notes": d["notes"], "failed": failed}


def main(argv: list[str]) -> int:
    names = argv or list(CASES)
    if not lint_corpus_build.is_built():
        print(lint_corpus_build.skip_reason())
        return 2
    bad = 0
    for name in names:
        r = run_case(CASES[name])
        bad += bool(r["failed"])
        print(json.dumps(r, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
