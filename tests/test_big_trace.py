"""The benchmark's large-trace generator makes a trace that reads like one longer session of
the same job: every step repeated, steps and linking ids distinct, the analysis unchanged."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import ROOT

SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"


def _big_trace():
    spec = importlib.util.spec_from_file_location("big_trace", ROOT / "benchmarks" / "big_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not SOURCE.is_file(), reason=f"shared traces not found ({SOURCE})")
@pytest.mark.slow
def test_three_copies_read_as_three_times_the_steps(tmp_path):
    from pitstop.trace import analyze_file

    make = _big_trace().make_big_trace
    out = tmp_path / "big.json"
    one = make(SOURCE, out, 1)  # at least one copy, whatever the size asked
    assert one["copies"] == 1
    info = make(SOURCE, out, int(one["bytes"] * 2.5))
    assert info["copies"] == 3 and info["bytes"] >= int(one["bytes"] * 2.5)
    events = json.loads(out.read_text())["traceEvents"]
    flows = [e["id"] for e in events if e.get("ph") == "s"]
    assert len(flows) == len(set(flows))  # flow ids unique across copies
    corr = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
    assert len(corr) == len(set(corr))
    base, big = analyze_file(SOURCE), analyze_file(out)
    assert big.steps == info["copies"] * base.steps == info["steps"]
    assert len(set(big.step_numbers)) == big.steps
    assert big.step_time.median == pytest.approx(base.step_time.median, rel=1e-6)
    assert big.gpu.busy == pytest.approx(base.gpu.busy, abs=0.02)
    assert big.rank == base.rank and big.device == base.device
