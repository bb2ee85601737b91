"""Issue 27's four CUDA training loops: does ``pitstop doctor`` give ``pitstop trace``'s answer?

Four small loops of our own (a ResNet-18-like net written here, a small GPT), one per row of
the issue's table:

- ``starved``: ResNet, DataLoader with 0 workers and a CPU-heavy ``__getitem__``;
- ``gpt_sync``: small GPT in fp32, ``torch.cuda.synchronize()`` + ``empty_cache()`` every
  step, batches made on the GPU (no input pipeline);
- ``resnet_good``: the same ResNet written well (bf16 autocast, channels_last, workers,
  pinned memory, fused AdamW), small images: many short kernels;
- ``ddp``: the ResNet under DDP over NCCL, one rank.

Issue 39 adds two compiled loops (a small MLP, bf16 autocast, batches made on the GPU, fused
AdamW, the way the PyTorch docs compile a small launch-bound model):

- ``compiled_graphs``: the forward and the loss in one ``@torch.compile(mode="reduce-overhead")``
  function (CUDA graphs);
- ``compiled_default``: ``torch.compile(model)`` in the default mode (Triton kernels, no graphs).

For them the doctor must observe the program as it runs: its profiled window shows their
Triton kernels (and the graph launches), the compiled calls (and replays) per step are the
same with its hooks on and off and in the window (no fidelity note), PIT601/PIT607 never
advise what the loop already does ("replay the step as CUDA graphs" to a graphed step, "torch.compile
the function" to a compiled one), and no finding's impact exceeds the observed step.

For each loop the script runs ``pitstop doctor --trace DIR`` (JSON and HTML; ``--trace`` keeps the
doctor's own profiled steps) and ``pitstop trace`` on that same trace, and checks per loop what
the issue expects: ``starved`` -> PIT101 first; ``gpt_sync`` -> PIT301 first (fp32 GEMM kernels on
a tensor-core GPU), PIT203's impact equal to the GPU wait after syncs that ``pitstop trace``
(re-based as the doctor re-bases every idle share since issue 39: seconds of the observed step)
measures on the same trace, no PIT101; ``resnet_good`` -> PIT601 (launch-bound); no PIT304 where
cuDNN's convolutions already run TF32 (``starved``, ``resnet_good``, ``ddp``; the fp32 matmuls of
``gpt_sync`` run without TF32 under torch's defaults, so PIT304 is right there); a summary
(PIT905) never first; no sync site inside pitstop; GPU busy of the doctor and of ``pitstop trace``
on the same run within 2 points. ``--separate-profile`` also profiles each loop in a run of its
own and prints that trace's GPU busy, labelled (extra information: another run, other steps).
Everything goes to ``--out``. Each loop runs in subprocesses with timeouts; one failing loop does
not stop the others. Without CUDA: one "skipped" line per loop, exit 0.

    python benchmarks/gpu_doctor_loops.py --out /tmp/gpu_loops [--probes] [--loops starved ddp compiled_graphs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

COMMON = '''
import argparse, os, time
import torch
from torch import nn
from torch.nn import functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10_000)
p.add_argument("--profile", default=None, help="run under torch.profiler and write DIR/trace.json")
args = p.parse_args()


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNet18ish(nn.Module):
    """Four stages of two basic blocks (64, 128, 256, 512 channels), as ResNet-18."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, classes)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


class Profiled:
    """torch.profiler over steps 3..8 when --profile is given (ProfilerStep# marks), else nothing."""

    def __init__(self):
        self.prof = None
        if args.profile:
            from torch.profiler import ProfilerActivity, profile, schedule
            os.makedirs(args.profile, exist_ok=True)
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                schedule=schedule(wait=1, warmup=2, active=5, repeat=1),
                                on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(args.profile, "trace.json")))
            self.prof.__enter__()
        self.n = 0

    def step(self):
        self.n += 1
        if self.prof is not None:
            self.prof.step()
            if self.n >= 9:
                self.prof.__exit__(None, None, None)
                raise SystemExit(0)
'''

LOOPS = {
    "starved": '''
import numpy as np
from torch.utils.data import DataLoader, Dataset


class Heavy(Dataset):
    """Each sample costs CPU work in the training process (num_workers=0)."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 64, 64)).astype(np.float32)
        for _ in range(6):
            img = np.fft.ifft2(np.fft.fft2(img)).real.astype(np.float32)
        return torch.from_numpy(img), int(i % 10)


model = ResNet18ish().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(Heavy(), batch_size=64, shuffle=True, num_workers=0)
prof = Profiled()
for step, (x, y) in enumerate(loader):
    if step >= args.steps:
        break
    x, y = x.cuda(), y.cuda()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    prof.step()
''',
    "gpt_sync": '''
class GPT(nn.Module):
    def __init__(self, vocab=8192, d=512, layers=6, heads=8, seq=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, idx):
        h = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.norm(self.blocks(h, mask=self.mask, is_causal=True)))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
prof = Profiled()
for step in range(args.steps):
    idx = torch.randint(0, 8192, (16, 257), device="cuda")  # batches made on the GPU
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    prof.step()
''',
    "resnet_good": '''
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(8192, 3, 32, 32), torch.randint(0, 10, (8192,)))
workers = min(8, os.cpu_count() or 1)
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=workers, pin_memory=True,
                    persistent_workers=True, drop_last=True)
model = ResNet18ish().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
prof = Profiled()
step = 0
while step < args.steps:
    for x, y in loader:
        x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        y = y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        prof.step()
        step += 1
        if step >= args.steps:
            break
''',
    "ddp": '''
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                   ("MASTER_PORT", "29517")):
    os.environ.setdefault(key, value)
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = DDP(ResNet18ish().cuda())
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
prof = Profiled()
for step in range(args.steps):
    x = torch.randn(64, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    prof.step()
dist.destroy_process_group()
''',
}

_MLP = '''
model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
'''
_MLP_LOOP = '''
prof = Profiled()
for step in range(args.steps):
    x = torch.randn(512, 1024, device="cuda")  # batches made on the GPU
    y = torch.randint(0, 1024, (512,), device="cuda")
    loss = forward_loss(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    prof.step()
'''
LOOPS["compiled_graphs"] = _MLP + '''

@torch.compile(mode="reduce-overhead")  # CUDA graphs
def forward_loss(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.cross_entropy(model(x), y)
''' + _MLP_LOOP
LOOPS["compiled_default"] = _MLP + '''
compiled = torch.compile(model)  # default mode: Triton kernels, no CUDA graphs


def forward_loss(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return F.cross_entropy(compiled(x), y)
''' + _MLP_LOOP

#: what the issue expects of each loop: (first finding or None, PIT203 expected, PIT601 expected,
#: PIT304 forbidden: cuDNN convolutions already in TF32)
EXPECT = {"starved": ("PIT101", False, False, True), "gpt_sync": ("PIT301", True, False, False),
          "resnet_good": (None, False, True, True), "ddp": (None, False, False, True),
          "compiled_graphs": (None, False, False, False), "compiled_default": (None, False, False, False)}
#: the compiled loops: the advice they must not get (what they already do), and whether they replay CUDA graphs
COMPILED = {"compiled_graphs": (("replay the step as CUDA graphs", "torch.compile(model, mode=", "torch.compile the function"),
                                True),
            "compiled_default": (("torch.compile(model, mode=", "torch.compile the function"), False)}


def _run(cmd: list[str], timeout: float, log: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"$ {' '.join(cmd)}\ntimed out after {timeout} s\n{exc.stderr or ''}")
        return 124, ""


def _timeout(script: Path, args) -> float:
    """Seconds for one subprocess: the compiled loops compile first (Inductor, tens of seconds)."""
    return max(args.timeout, 150.0) if script.stem in COMPILED else args.timeout


def _doctor(script: Path, out: Path, args) -> dict:
    timeout = _timeout(script, args)
    cmd = [sys.executable, "-m", "pitstop", "doctor", str(script), "--steps", str(args.steps), "--warmup", "3",
           "--timeout", str(timeout - 10), "--format", "json", "--html", str(out / "doctor.html"),
           "--trace", str(out / "doctor_trace")]
    if not args.probes:
        cmd.append("--no-probes")
    if script.stem == "ddp":
        cmd[4:4] = ["--nproc-per-node", "1"]
    rc, stdout = _run(cmd, timeout, out / "doctor.log")
    (out / "doctor.json").write_text(stdout)
    return json.loads(stdout) if stdout.strip() else {"error": f"pitstop doctor exited {rc}"}


def _trace(trace: Path, out: Path, args, label: str) -> dict:
    """``pitstop trace`` of one trace file, its JSON kept as ``out/<label>.json``."""
    if not trace.is_file():
        return {"error": f"no trace at {trace}"}
    rc, stdout = _run([sys.executable, "-m", "pitstop", "trace", str(trace), "--format", "json"],
                      args.timeout, out / f"{label}.log")
    (out / f"{label}.json").write_text(stdout)
    return json.loads(stdout) if stdout.strip() else {"error": f"pitstop trace exited {rc}"}


def _doctors_trace(doc: dict, out: Path) -> Path:
    """The doctor's own profiled steps, kept by ``--trace DIR`` (its JSON names the file)."""
    return Path(doc.get("trace") or out / "doctor_trace" / "pitstop_trace.json")


def _separate(script: Path, out: Path, args) -> dict:
    """Extra information: the loop profiled in a run of its own (other steps, no doctor)."""
    folder = out / "profile"
    rc, _ = _run([sys.executable, str(script), "--profile", str(folder)], _timeout(script, args), out / "profile.log")
    if not (folder / "trace.json").is_file():
        return {"error": f"the separately profiled run exited {rc} without a trace"}
    return _trace(folder / "trace.json", out, args, "trace_separate")


def _busy(tr: dict | None) -> float | None:
    rank = ((tr or {}).get("ranks") or [{}])[0]
    return (rank.get("gpu") or {}).get("busy")


def _rebased_idle(share: float | None, doc: dict) -> float | None:
    """A share of GPU idle in the profiled window as the doctor states it (issue 39): seconds of
    the observed step, the profiler's extra idle taken out. The doctor's fidelity record gives
    the two steps; idle scales by (observed - busy) / (profiled - busy), never above 1."""
    if share is None:
        return None
    fid, busy = doc.get("fidelity") or {}, (doc.get("gpu") or {}).get("busy")
    p, o = fid.get("profiled_step"), fid.get("observed_step")
    if not p or not o:
        return share
    b = (busy or 0.0) * p
    scale = 1.0 if p <= b else max(0.0, min(1.0, (o - b) / (p - b)))
    return min(share * p * scale / o, 1.0)


def _facts(name: str, doc: dict, tr: dict, separate: dict | None) -> dict:
    findings = doc.get("findings", [])
    codes = [f["code"] for f in findings]
    top = findings[0] if findings else None
    obs = doc.get("observations", {})
    sites = [s.get("where", "") for s in doc.get("syncs", []) + obs.get("cuda_calls", [])]
    busy_doc, busy_tr = (doc.get("gpu") or {}).get("busy"), _busy(tr)
    rank = (tr.get("ranks") or [{}])[0]
    window, steps = (rank.get("window") or {}).get("seconds"), rank.get("steps")
    step_tr = window / steps if window and steps else None  # the shares' denominator: the window per step
    d203 = next((f["impact"] for f in findings if f["code"] == "PIT203"), None)
    t203 = next((f["impact"] for f in tr.get("findings", []) if f["code"] == "PIT203"), None)
    want_top, want_203, want_601, no_304 = EXPECT[name]
    want_d203 = _rebased_idle(t203, doc)
    same_203 = (d203 is not None and want_d203 is not None and d203.get("share") is not None
                and abs(d203["share"] - want_d203) <= 1e-6)
    checks = {
        "top finding": want_top is None or (top is not None and top["code"] == want_top),
        "no summary first": top is None or top["code"] != "PIT905",
        "no PIT101 without an input pipeline": name != "gpt_sync" or "PIT101" not in codes,
        "PIT203 = the trace's wait after syncs": not want_203 or same_203,
        "launch-bound PIT601": not want_601 or "PIT601" in codes,
        "no PIT304 on TF32 convolutions": not no_304 or "PIT304" not in codes,
        "no sync site inside pitstop": not any("/pitstop/" in s for s in sites),
        "GPU busy within 2 points (same run)": (busy_doc is not None and busy_tr is not None
                                                and abs(busy_doc - busy_tr) <= 0.02),
        "no impact past the observed step": _within_step(doc),
    }
    if name in COMPILED:
        checks.update(_compiled_checks(name, doc, rank))
    return {
        "loop": name, "device": doc.get("device", {}).get("name"), "codes": codes,
        "top": f"{top['code']} {top['severity']} {top['title']}" if top else None,
        "pit203_doctor": d203, "pit203_trace": {"share": t203, "seconds_per_step": t203 * step_tr if t203 and step_tr else None},
        "gpu_busy_doctor": busy_doc, "gpu_busy_trace": busy_tr, "gpu_busy_separate_run": _busy(separate),
        "trace_findings": [f["code"] for f in tr.get("findings", [])],
        "sync_sites": sites, "checks": checks,
        "window_cost": next((n for n in doc.get("notes", []) if "profiled steps" in n), None),
        "fidelity": doc.get("fidelity"), "overhead": (doc.get("observations") or {}).get("overhead"),
        "compile": {k: ((doc.get("observations") or {}).get("compile") or {}).get(k)
                    for k in ("calls_per_step", "paired_calls_per_step", "bare_calls_per_step", "replays_per_step",
                              "paired_replays_per_step", "bare_replays_per_step")},
        "window_compiled": rank.get("compiled"),
        "impacts": [(f["code"], f["impact"]["share"], f["impact"]["seconds_per_step"]) for f in findings],
        "step_median": (doc.get("step_time") or {}).get("median"),
        "errors": [e for e in (doc.get("error"), tr.get("error"), (separate or {}).get("error")) if e],
    }


def _within_step(doc: dict) -> bool:
    """No time finding claims more than the observed step; the causes together neither."""
    step = (doc.get("step_time") or {}).get("median")
    time = [f for f in doc.get("findings", []) if f["impact"]["kind"] == "time" and f["impact"]["share"]]
    causes = sum(f["impact"]["share"] for f in time if not f.get("summary"))
    return causes <= 1.0001 and all(
        f["impact"]["share"] <= 1 and (f["impact"]["seconds_per_step"] is None or step is None
                                       or f["impact"]["seconds_per_step"] <= step * 1.0001) for f in time)


def _compiled_checks(name: str, doc: dict, rank: dict) -> dict:
    """Issue 39's checks on a compiled loop (see the module docstring)."""
    forbidden, graphs = COMPILED[name]
    c = (doc.get("observations") or {}).get("compile") or {}
    w = rank.get("compiled") or {}
    fixes = [f["fix"] for f in doc.get("findings", []) if f["code"] in ("PIT601", "PIT607")]
    out = {
        "window shows the Triton kernels": (w.get("triton_share") or 0) > 0,
        "compiled calls per step, hooks on = off": (c.get("calls_per_step") or 0) > 0
        and c.get("paired_calls_per_step") == c.get("bare_calls_per_step"),
        "no fidelity note": not (doc.get("fidelity") or {}).get("changed"),
        "no advice to do what it does": not any(x in fix for fix in fixes for x in forbidden),
    }
    if graphs:
        out["window shows the graph launches"] = (w.get("graph_launches_per_step") or 0) > 0
        out["graph replays per step, hooks on = off"] = (c.get("replays_per_step") or 0) > 0 \
            and c.get("paired_replays_per_step") == c.get("bare_replays_per_step")
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _print(f: dict) -> None:
    d203, t203 = f["pit203_doctor"] or {}, f["pit203_trace"]
    print(f"== {f['loop']} on {f['device']}" + (f"  ERRORS: {'; '.join(f['errors'])}" if f["errors"] else ""))
    print(f"   doctor's findings: {' '.join(f['codes'])}  (first: {f['top']})")
    print(f"   pitstop trace of the doctor's own trace: {' '.join(f['trace_findings'])}")
    print(f"   PIT203 impact: doctor {_pct(d203.get('share'))} ({d203.get('seconds_per_step')} s/step) vs "
          f"pitstop trace's GPU wait after syncs {_pct(t203['share'])} ({t203['seconds_per_step']} s/step), same trace")
    print(f"   launch-bound (PIT601) present: {'PIT601' in f['codes']};  PIT304 present: {'PIT304' in f['codes']};  "
          f"sync sites: {f['sync_sites'] or 'none'}")
    extra = (f";  extra, a separately profiled run: {_pct(f['gpu_busy_separate_run'])}"
             if f.get("gpu_busy_separate_run") is not None else "")
    print(f"   GPU busy: doctor {_pct(f['gpu_busy_doctor'])}, pitstop trace of the same run {_pct(f['gpu_busy_trace'])}"
          + extra)
    print(f"   profiled window's cost: {f['window_cost']}")
    print(f"   fidelity: {f.get('fidelity')};  doctor's own overhead: {f.get('overhead')}")
    if f.get("compile", {}).get("calls_per_step") is not None:
        print(f"   compiled: {f['compile']};  window: {f.get('window_compiled')}")
    print("   " + ", ".join(f"{k}: {'ok' if v else 'FAIL'}" for k, v in f["checks"].items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for every output")
    ap.add_argument("--loops", nargs="*", default=list(LOOPS), choices=list(LOOPS))
    ap.add_argument("--steps", type=int, default=6, help="doctor's observed steps (default 6)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per subprocess (default 60)")
    ap.add_argument("--probes", action="store_true", help="let the doctor run its hardware probes (slower)")
    ap.add_argument("--separate-profile", action="store_true",
                    help="also profile each loop in a run of its own (extra information; slower)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        for name in args.loops:
            print(f"{name}: skipped: no CUDA device")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    t0, results = time.perf_counter(), []
    for name in args.loops:
        out = args.out / name
        out.mkdir(exist_ok=True)
        script = out / f"{name}.py"
        script.write_text(textwrap.dedent(COMMON) + textwrap.dedent(LOOPS[name]))
        try:
            doc = _doctor(script, out, args)
            tr = _trace(_doctors_trace(doc, out), out, args, "trace")
            facts = _facts(name, doc, tr, _separate(script, out, args) if args.separate_profile else None)
        except Exception as exc:  # one broken loop must not hide the others
            facts = {"loop": name, "errors": [f"{type(exc).__name__}: {exc}"], "checks": {}}
            print(f"== {name}: failed: {facts['errors'][0]}")
        else:
            _print(facts)
        results.append(facts)
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "seconds": round(time.perf_counter() - t0, 1), "loops": results}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"{len(results)} loops on {summary['device']} in {summary['seconds']} s; outputs in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
