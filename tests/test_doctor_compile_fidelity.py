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


def test_the_doctor_keeps_none_of_the_scripts_tensors_alive(warm_doctor, tmp_path):
    """The steps the doctor measures memory in (warm-up, observed, profiled) leave the script's
    memory as the script alone would: while a step works, no tensor of an earlier step is held
    (the profiled step's data flow once held the last layer's output for the rest of the run: a
    GPT's 13.7 GiB of logits on an H200, out of memory in the traced step; the probes' batch was
    held through the next step). In the steps without hooks (bare, traced: time and the GPU
    timeline, no memory) the doctor holds at most the probes' one batch, never an output."""
    import runpy

    out = tmp_path / "alive.txt"
    argv = sys.argv[:]
    sys.argv = ["keeps_nothing.py", str(tmp_path / "alone.txt"), "14"]
    try:  # the script alone, in this process (torch is imported already): it holds nothing itself
        runpy.run_path(str(FIXTURES / "doctor" / "keeps_nothing.py"), run_name="__main__")
    finally:
        sys.argv = argv
    alone = (tmp_path / "alone.txt").read_text().splitlines()
    assert len(alone) == 14 and all(line.split()[1:] == ["0", "0"] for line in alone)
    report = warm_doctor.report(FIXTURES / "doctor" / "keeps_nothing.py", str(out), "14", steps=4, warmup=1,
                                trace_dir=str(tmp_path / "trace"))
    assert report.data["status"] in ("finished", "stopped"), report.data["message"]
    kinds = {r["index"]: r["kind"] for r in report.data["steps"]["records"]}
    assert {"warmup", "observed", "bare", "profiled", "traced"} <= set(kinds.values()), kinds
    lines = {int(s): (int(b), int(o)) for s, b, o in (line.split() for line in out.read_text().splitlines())}
    # the doctor stops the script inside its last step: that one writes no line
    assert {kinds[s] for s in lines if s in kinds} >= {"warmup", "observed", "bare", "profiled", "traced"}
    for step, (batches, outputs) in lines.items():
        kind = kinds.get(step, "after the plan")
        assert outputs == 0, f"step {step} ({kind}): {outputs} outputs of earlier steps held"
        assert batches <= (1 if kind in ("bare", "traced") else 0), f"step {step} ({kind}): {batches} batches held"
