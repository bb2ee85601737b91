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

``NEW_SCRIPTS`` (issue 40) records three more, never used here before, with the manifest to
rebuild them (repository, commit, path, sha256); ``benchmarks/doctor_real_costs.py`` times each
alone and under the doctor side by side (is the doctor worth its wait, and what does it find).
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


@dataclass(frozen=True)
class RealScript:
    """A script this project had never run before issue 40, run unchanged (sizes cut only through its
    own command line): ``repo`` at ``commit``, ``files`` (path in the repository -> sha256), laid out
    in the working folder at ``layout[path]`` (default: the same path), ``script`` and ``args`` there,
    ``data`` (which synthetic data :mod:`doctor_real_costs` writes). ``benchmarks/doctor_real_costs.py``
    materializes it from a local mirror and times it alone and under the doctor, side by side."""

    name: str
    repo: str
    commit: str
    files: dict[str, str]
    script: str
    args: tuple[str, ...]
    data: str = "none"
    layout: dict[str, str] = field(default_factory=dict)


_TORCHDIFFEQ = {f"torchdiffeq/{p}": h for p, h in {
    "__init__.py": "9092b253060d186b00846d00ff260b6dec72f9fe7e0a9aa0d5bbf87e7c45dcd9",
    "_impl/__init__.py": "01322ad64ef635ceb44de4026d8436e07436ec676b6b17504cac7d65edf56363",
    "_impl/adaptive_heun.py": "ecd643451cd1680f52de65c808fcc8f8c06724708daf09ff310599c5bc10e7a9",
    "_impl/adjoint.py": "5fab07773c5ca1ca5a25cef545aa935b95b6acb479423ce4cab271a37741d0e7",
    "_impl/bosh3.py": "3802763df28ea431ef2ebc331ac776dcccdc9a4be3cc7ddc2d8c7e19dd811d3f",
    "_impl/dopri5.py": "8d9f7f1370ffa0de3a90ef9cc96185ec8a3b089b6d863728c8085629b9a38809",
    "_impl/dopri8.py": "597dbf7fa86f63a68e9ccb2d95f8fb99b052b45a68d8ef612f5d24d3c559d4f0",
    "_impl/event_handling.py": "4aa14e0ad2812f02a361a7d9f6a9c031147c0ffe14678edd8cfb5d816153aed3",
    "_impl/fehlberg2.py": "26d760d8c37cb4b02a7f16dbe30313589b2b0a8d0d2167ba95c3242e76544c43",
    "_impl/fixed_adams.py": "85845040abc11afb74d1a632a383222eaceaa14dd940d2a4d0f7befbb25880f4",
    "_impl/fixed_grid.py": "bb2915bdbbfb464cdb79593460761b8d9da73f653eb6894e178caf0ee03266b3",
    "_impl/fixed_grid_implicit.py": "12025a0f22573afa81c8dfee2385f1d68c11d637db3b2e78e7a53c63862f4025",
    "_impl/interp.py": "436b6e8e346716dd466fede0a9038cc6e6e9c6573ffef526f028a890ab0222d6",
    "_impl/misc.py": "49a4707d4c2bdd2ad162fa449fcad3bedec5719159cfddf1caec516bc28db5be",
    "_impl/odeint.py": "1fe96dc69b91d7bd53d100023b38cdb876c8b31ebbc46c12f8172c8b03b855cc",
    "_impl/rk_common.py": "7be03cff5f9ee078edf7be1200c28aa21e56640f551532991959c5aca27f7bb2",
    "_impl/scipy_wrapper.py": "f5b0e8e275e205b4ce03dfe320dc4189d5d5b2c7af7efbc532ccdc82451cc62e",
    "_impl/solvers.py": "724bc51c021f84366759018ba5c61e263b58492e9e2083e6b60fda71e84e68bd",
    "_impl/tsit5.py": "e4709cf029cdcf45d08842ca07a52b74e55359657cac3b9b39bc0fd6e80e2b36"}.items()}

#: Issue 40's three scripts (none used by this project before: not in the lint corpus, not run by
#: the doctor): a word-level LSTM language model (yunjey/pytorch-tutorial, hyper-parameters fixed in
#: the script, PTB-shaped synthetic text), llama2.c's training script (its configurator's command
#: line: a 4-layer model on a custom 512-token vocabulary, evaluation of 100 batches per split at
#: step 0 and every 2000 steps, the script's defaults), and torchdiffeq's ODE demo (a neural ODE
#: fitted with dopri5, evaluated every 20 iterations, the script's defaults). Extra imports:
#: ``pip install --no-deps --target DIR sentencepiece==0.2.3 scipy==1.17.1`` (llama2.c's
#: tinystories.py imports sentencepiece; torchdiffeq imports scipy).
NEW_SCRIPTS = {c.name: c for c in (
    RealScript("lstm-lm", "yunjey/pytorch-tutorial", "0500d3df5a2a8080ccfccbc00aca0eacc21818db", {
        "tutorials/02-intermediate/language_model/main.py": "4edc4e08c34d3cb4528589f8b6e99a4bafaadced86fd6b35adcd5f7d4afcf5cc",
        "tutorials/02-intermediate/language_model/data_utils.py":
            "0e8cdf0729b5b28205553bc00d9ff23ef6a8f64753f2d8f20aa13cb40d8fc9c7"},
        "main.py", (), data="ptb",
        layout={"tutorials/02-intermediate/language_model/main.py": "main.py",
                "tutorials/02-intermediate/language_model/data_utils.py": "data_utils.py"}),
    RealScript("llama2c", "karpathy/llama2.c", "350e04fe35433e6d2941dce5a1f53308f87058eb", {
        "train.py": "97d4a16f7d0c98b1d4f767c646095f7b78b7a58d5f668be716d33924faa8feb8",
        "model.py": "54f35dbd347100c0066da93dfdf9f19c2ec1e8758bfffcedbdfdb09d5c343e1f",
        "tinystories.py": "86d38fbd5f10b77ab921858dd53fc29d8f5a52eb3a636eccb48fb0d423d44f88",
        "tokenizer.py": "585d1c34be6f387d3143297c7fbbce49ad362dc9cecd9f68037bbed8126bcf33",
        "export.py": "aba8d36ee881478bf59e13f63224e37a00b51a18cacbc38d0def52cc3c0cb475",
        "configurator.py": "5cc23aca26b4ab3c0d9e5f82740f4781f9444f42718c15abcee70d93c5aabe8f"},
        "train.py", ("--device=cpu", "--compile=False", "--vocab_source=custom", "--vocab_size=512", "--batch_size=8",
                     "--max_seq_len=128", "--dim=128", "--n_layers=4", "--n_heads=4", "--n_kv_heads=4"), data="tok512"),
    RealScript("ode-demo", "rtqichen/torchdiffeq", "657943acefa826ef04c025ebeb1ff5e9d60dc268", {
        "examples/ode_demo.py": "36cc0ebfcf56afb7a291142c03a19b8f0bd3d437f914f3f98657e048aa8a60e4", **_TORCHDIFFEQ},
        "ode_demo.py", (), layout={"examples/ode_demo.py": "ode_demo.py"}),
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
