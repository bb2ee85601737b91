"""The CUDA paths of issue 29, importable and runnable everywhere: the GPU examples and the
engine-vs-raw benchmark train on the CPU here, ``benchmarks/gpu_check.sh`` runs end to end
with every CUDA stage skipped for a reason; the tests marked ``cuda`` take the CUDA path when a
GPU is present (``benchmarks/gpu_check.sh`` runs them) and skip here, saying why."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
import tarfile

import pytest
import torch

from conftest import ROOT
from pitstop.examples import GPU_SCRIPTS

CUDA = torch.cuda.is_available()
NO_CUDA = "no CUDA device: this test takes the CUDA path (benchmarks/gpu_check.sh runs it on a GPU)"
DEVICE = "cuda" if CUDA else "cpu"


def _engine_vs_raw():
    spec = importlib.util.spec_from_file_location("engine_vs_raw", ROOT / "benchmarks" / "engine_vs_raw.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(GPU_SCRIPTS))
def test_gpu_examples_train_on_cuda_when_present_else_on_the_cpu(name, capsys):
    module = importlib.import_module(GPU_SCRIPTS[name])
    args = ["--steps", "3", "--log-every", "1", "--batch-size", "4"]
    module.main(args + (["--workers", "0", "--work", "1", "--width", "8"] if name == "gpu_cnn" else
                        ["--block-size", "16", "--layers", "1", "--width", "64"]))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if re.match(r"step\s+\d+\s+loss ", ln)]
    assert len(lines) == 3 and all(ln.endswith(f"on {DEVICE}") for ln in lines), lines
    losses = [float(ln.split()[3]) for ln in lines]
    assert all(v == v and v > 0 for v in losses)  # finite, positive cross-entropy


def test_gpu_example_refuses_cuda_without_a_gpu():
    if CUDA:
        pytest.skip("a GPU is present")
    from pitstop.examples import gpu_cnn

    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_cnn.main(["--device", "cuda", "--steps", "1"])


def test_engine_vs_raw_runs_both_loops_and_writes_the_ratio(tmp_path, capsys):
    mod = _engine_vs_raw()
    assert mod.main(["--device", "cpu", "--steps", "4", "--warmup", "1", "--repeats", "1", "--batch", "4",
                     "--width", "8", "--no-compile", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "engine_vs_raw.json").read_text())
    assert set(record["steps_per_s"]) == {"raw loop", "pitstop.fit"}
    assert all(len(v) == 1 and v[0] > 0 for v in record["steps_per_s"].values())
    assert record["ratio_of_medians"] > 0 and record["device"].startswith("CPU")
    assert "engine/raw on CPU" in capsys.readouterr().out


@pytest.mark.slow
def test_gpu_check_script_runs_on_cpu_with_every_cuda_stage_skipped(tmp_path):
    if CUDA:
        pytest.skip("a GPU is present: the script runs for minutes there; run benchmarks/gpu_check.sh itself")
    out, dest = tmp_path / "check", tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--python", sys.executable, str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin",
                                                                                      "OUT": str(dest)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    for stage in ("selftest", "bench", "engine", "pytest", "examples"):
        line = next(ln for ln in summary.splitlines() if ln.startswith(stage + " "))
        assert "skipped" in line and "no CUDA device" in line, line
    assert "torch " in (out / "00_machine.txt").read_text()
    with tarfile.open(dest / "gpu_check.tar.gz") as tar:
        names = tar.getnames()
    assert "check/00_machine.txt" in names and "check/summary.txt" in names
    assert (dest / "gpu_check_summary.txt").read_text() == summary


# -- the CUDA paths themselves (skipped on CPU) -------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
def test_every_benchmark_runs_tiny_on_cuda():
    from pitstop.bench.runner import available, run_one
    from pitstop.bench.timing import BenchContext

    ctx = BenchContext("cuda", "tiny")
    for cls in available():
        if cls.compiles:
            continue  # compiled on CUDA by the bench stage of gpu_check.sh
        result = run_one(cls, ctx)
        assert not result.error, (cls.tip, result.reason)
        assert result.verdict != "skipped" or not cls.gpu_only, (cls.tip, result.reason)


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
def test_fit_on_cuda_with_bf16_channels_last_fused():
    from torch.nn import functional as F

    from pitstop.engine import Recipe, fit
    from pitstop.examples.models import make_cnn

    model = make_cnn(naive=False, width=8)
    batches = [(torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))) for _ in range(3)]
    recipe = Recipe(precision="bf16-mixed", channels_last=True, optimizer_impl="fused", device="cuda")
    result = fit(model, torch.optim.AdamW(model.parameters()), lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                 batches, recipe=recipe, max_steps=3, log_every=1, progress=False)
    weight = model.features[0].weight
    assert weight.is_cuda and weight.is_contiguous(memory_format=torch.channels_last)
    assert result.steps == 3


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
def test_engine_vs_raw_on_cuda(tmp_path):
    mod = _engine_vs_raw()
    assert mod.main(["--device", "cuda", "--steps", "6", "--warmup", "2", "--repeats", "1", "--batch", "8",
                     "--width", "8", "--no-compile", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "engine_vs_raw.json").read_text())
    assert record["ratio_of_medians"] > 0 and "CUDA" in record["device"]



def test_gpu_page_copies_numbers_from_the_run_and_says_what_is_missing(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_page", ROOT / "benchmarks" / "gpu_page.py")
    gpu_page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_page)
    run = tmp_path / "gpu_check_out"
    (run / "bench").mkdir(parents=True)
    (run / "00_machine.txt").write_text("gpu_check.sh started 2026-01-01T00:00:00Z on box\nname, driver_version, "
                                        "memory.total, compute_cap\nSome GPU, 999.1, 80 GiB, 9.0\nnoise line\n")
    (run / "summary.txt").write_text("selftest                   ok       exit 0      99.0 s\n")
    report = {"seconds": 61.5, "budget": 75.0, "device": {"device": "cuda", "gpu": {"name": "Some GPU"}},
              "results": [{"code": "PIT607", "verdict": "confirmed", "seconds": 3.25,
                           "ratio": {"value": 2.345, "low": 2.1, "high": 2.6, "confidence": 0.95},
                           "claim": {"claimed_ratio": 2.0}}]}
    (run / "bench" / "gpu.json").write_text(json.dumps(report))
    text, bench = gpu_page.page(run)
    assert "Some GPU, 999.1, 80 GiB, 9.0" in text and "noise line" not in text
    assert "| PIT607 | confirmed | 2.35x | 2.10x-2.60x | 2x | 3.2 |" in text
    assert "1 benchmarks in 61.5 s (run budget 75.0 s) on Some GPU." in text
    assert "No selftest report in this run" in text and "No engine_vs_raw output in this run" in text
    assert bench == report


def test_gpu_page_reads_a_tarball_with_any_top_folder_and_puts_the_note_first(tmp_path):
    """The committed docs/bench/gpu.md came from a run unpacked as gpu_run1/, not gpu_check_out/."""
    spec = importlib.util.spec_from_file_location("gpu_page", ROOT / "benchmarks" / "gpu_page.py")
    gpu_page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_page)
    run = tmp_path / "gpu_run1"
    run.mkdir()
    (run / "00_machine.txt").write_text("name, driver_version\nOther GPU, 1.0\n")
    with tarfile.open(tmp_path / "run.tar.gz", "w:gz") as tar:
        tar.add(run, arcname="gpu_run1")
    page_path, json_path = tmp_path / "gpu.md", tmp_path / "gpu.json"
    assert gpu_page.main([str(tmp_path / "run.tar.gz"), "--page", str(page_path), "--json", str(json_path),
                          "--note", "Measured before the fixes."]) == 0
    text = page_path.read_text()
    assert text.index("**Note.** Measured before the fixes.") < text.index("## Machine") < text.index("Other GPU, 1.0")
    assert "No bench report in this run" in text and not json_path.exists()
    with pytest.raises(SystemExit, match="no such file"):
        gpu_page.main([str(tmp_path / "missing.tar.gz")])
