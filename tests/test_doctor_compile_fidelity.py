"""The doctor observes a compiled program as it runs (issue 39): under the doctor a compiled step
makes the compiled calls it makes alone, with no new graph break or recompile, its profiled
window shows the compiled region (not the eager operators), and a compiled function is a
forward (its phases and batch are found).

``fixtures/compile/compiled_step.py`` compiles an MLP step with ``torch.compile`` in its default
mode (Inductor, as users run it on a CPU) two ways: the forward and loss in one compiled
function, and a compiled model. Before issue 39 the doctor's profiled step (FLOP counting, a
``TorchDispatchMode``) made dynamo mark the compiled function "skip" for good: the traced steps
after it ran eagerly (``aten::linear``, no ``Torch-Compiled Region``), and a compiled function's
calls were never seen (``calls`` 0, no forward phase).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

SCRIPT = FIXTURES / "compile" / "compiled_step.py"
STEPS, WARMUP, BATCH = 4, 2, 64


@pytest.fixture(scope="module")
def alone() -> dict[str, dict]:
    """Each way of compiling run alone (no pitstop in the process) under a plain
    ``torch.profiler``: compiled graph runs (``CompiledFunction``) per optimizer step, and
    dynamo's graph breaks. One process runs both, dynamo reset in between."""
    code = ("import json, runpy, sys, torch, torch._dynamo\n"
            "from torch._dynamo.utils import counters\n"
            "out, script = {}, sys.argv[1]\n"
            "for how in ('function', 'model'):\n"
            "    torch._dynamo.reset(); counters.clear()\n"
            "    sys.argv = [script, '--how', how, '--steps', '6']\n"
            "    with torch.profiler.profile() as prof:\n"
            "        runpy.run_path(script, run_name='__main__')\n"
            "    names = [e.name for e in prof.events()]\n"
            "    steps = sum(n.startswith('Optimizer.step#') for n in names)\n"
            "    out[how] = {'calls_per_step': names.count('CompiledFunction') / steps,\n"
            "                'breaks': sum(counters['graph_break'].values())}\n"
            "print(json.dumps(out))")
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def _trace_names(folder: Path) -> list[str]:
    path = folder / "pitstop_trace.json"
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return [e.get("name", "") for e in doc["traceEvents"]]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["function", "model"])
def test_a_compiled_step_runs_compiled_under_the_doctor_as_alone(how, alone, warm_doctor, tmp_path):
    run = warm_doctor.report(SCRIPT, "--how", how, steps=STEPS, warmup=WARMUP, probes=False, trace_dir=str(tmp_path),
                             timeout=600)
    assert run.exit_code == 0, run.stderr[-3000:]
    d, base = run.data, alone[how]
    # the profiled window (--trace) shows the compiled region in every traced step, no eager linear
    names = _trace_names(tmp_path)
    traced = sum(n.startswith("ProfilerStep#") for n in names)
    assert traced == 3 and names.count("CompiledFunction") == traced * base["calls_per_step"]
    assert "aten::linear" not in names
    # a compiled step is a training step: its forward (a compiled function's call) and its batch
    b = d["breakdown"]
    assert b["forward"]["seconds"] > 0 and b["backward"]["seconds"] > 0 and b["optimizer"]["seconds"] > 0
    assert d["throughput"]["samples_per_step"] == BATCH and d["throughput"]["batch_size"] == BATCH
    model = d["observations"]["models"][0]
    assert model["compiled"] and model["compiled_function"] == (how == "function")
    assert d["flops"]["per_step"] > 0  # counted on the profiled step, run eagerly under force_eager
    # the same compiled calls per step as alone, with the doctor's hooks on and off
    c = d["observations"]["compile"]
    assert base["calls_per_step"] >= 1 and c["calls"] >= STEPS  # forwards seen at the compiled boundary
    assert c["calls_per_step"] == pytest.approx(base["calls_per_step"])
    assert c["paired_calls_per_step"] == c["bare_calls_per_step"] == pytest.approx(base["calls_per_step"])
    assert c["graph_breaks"] == base["breaks"] == 0 and c["recompiles"] == [] and c["limit_hits"] == []
