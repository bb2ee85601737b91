"""``pitstop selftest``: without a GPU ``--device cuda`` skips in one line with exit 0; the
CPU chain (doctor with its live trace, pitstop trace on it, compare, bench) runs end to end."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from pitstop.selftest import Plan, plan_for


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="a GPU is present: --device cuda runs instead of skipping")
def test_cuda_without_gpu_skips_in_one_line(tmp_path):
    r = run_cli("selftest", "--device", "cuda", "--out", str(tmp_path))
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "skipped" in lines[0] and "no CUDA device" in lines[0]
    d = json.loads(run_cli("selftest", "--device", "cuda", "--out", str(tmp_path), "--format", "json").stdout)
    assert d["skipped"] and d["stages"] == [] and d["ok"] is True


def test_plans():
    cpu, cuda = plan_for("cpu"), plan_for("cuda")
    assert isinstance(cpu, Plan) and not cpu.probes and cpu.bench_quick and cpu.bench_codes
    assert cuda.probes and not cuda.bench_quick and cuda.bench_codes == ()  # every benchmark, full size


@pytest.mark.slow
def test_cpu_chain_end_to_end(tmp_path):
    out = tmp_path / "st"
    page = tmp_path / "bench" / "cpu-selftest.md"
    r = run_cli("selftest", "--device", "cpu", "--out", str(out), "--bench-out", str(page), "--format", "json",
                timeout=900)
    d = json.loads(r.stdout)
    assert r.returncode == 0, (d, r.stderr[-2000:])
    stages = {s["name"]: s for s in d["stages"]}
    assert list(stages) == ["doctor", "trace", "compare", "bench"]
    assert all(s["status"] == "ok" for s in stages.values()), stages
    assert "host-only" in stages["trace"]["detail"]
    assert (out / "trace" / "pitstop_trace.json").is_file() and (out / "doctor.json").is_file()
    text = page.read_text()
    assert text.startswith("# `pitstop bench` on this CPU") and "| PIT501 |" in text
    assert page.with_suffix(".json").is_file()


def test_a_failing_stage_is_reported_not_raised(tmp_path, monkeypatch):
    from pitstop import selftest

    calls = []

    def fake_run(args, timeout, stdout=None):
        calls.append(args[0])
        if stdout is not None:
            stdout.write_text("")
        return 3, "", "the script failed"

    monkeypatch.setattr(selftest, "_run", fake_run)
    report = selftest.run_selftest(plan_for("cpu"), tmp_path)
    by = {s.name: s for s in report.stages}
    assert not report.ok and by["doctor"].status == "failed" and "the script failed" in by["doctor"].detail
    assert by["trace"].status == "skipped" and by["compare"].status == "skipped"
    assert calls == ["doctor", "bench"]
