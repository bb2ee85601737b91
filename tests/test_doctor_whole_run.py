"""The doctor on what real scripts do beside their steps (issue 40): probes worth their wait,
the machine itself (PIT108), work done every N steps, and the line that costs under a framework
call. The probe tests run in this process on tiny models; the rest fork doctor runs from the warm
worker (``tests/doctor_warm.py``): only a run shows threads waiting for a core beside a busy one,
an evaluation inside the warm-up, and a runner's frames under the user's ``fit()``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from conftest import FIXTURES, default_signals
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.probe import ProbeSkip
from pitstop.doctor.analysis.records import Breakdown, StepTime
from pitstop.doctor.record.probing.run import ProbeContext
from pitstop.machine import CpuFeatures

DOCTOR = FIXTURES / "doctor"
#: a CPU description with no native bf16 (AVX2 only) and one with it: injected, whatever runs the suite
AVX2 = CpuFeatures("AMD EPYC (AVX2 only, injected)", frozenset({"sse2", "avx", "avx2", "fma"}))
BF16 = CpuFeatures("Intel Xeon (AVX512-BF16, injected)", frozenset({"avx2", "avx512f", "avx512_bf16"}))


class _SlowBf16(ProbeContext):
    """A probe context whose bf16 forward+backward is planted 30 ms of CPU work slower than
    fp32's: what emulated bf16 does on an AVX2-only CPU (slower on wall and CPU time alike),
    without depending on the CPU that runs the suite."""

    def fwd_bwd(self, model, args, autocast=None):
        run = super().fwd_bwd(model, args, autocast)
        if autocast is None:
            return run

        def slow():
            run()
            end = time.thread_time() + 0.03
            while time.thread_time() < end:
                pass
        return slow


def _ctx(cpu, cls=ProbeContext, **kw):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    obs = Observations(steps_observed=4, step_time=StepTime(mean=0.01, median=0.01),
                       breakdown=Breakdown(forward=0.004, backward=0.005, other=0.001))
    return cls(obs, model=model, args=(torch.randn(16, 16),), compiled=False, optimizers=[], cpu=cpu, **kw)


def test_the_precision_probe_on_a_cpu_without_native_bf16_stops_after_one_slow_round():
    from pitstop.tips.pit301_mixed_precision import PrecisionProbe

    ((key, emulated),) = list(PrecisionProbe().run(_ctx(AVX2, _SlowBf16)))
    assert key == "precision" and emulated.runs == 1
    gain = emulated.gain("bfloat16")
    assert gain.ratio < 0.5 and gain.low == gain.high == gain.ratio  # the round's ratio is the verdict
    assert "no AVX512-BF16/AMX" in emulated.extra["settled"] and "no more rounds" in emulated.extra["settled"]
    assert emulated.hardware is not None and "no native bf16" in emulated.hardware.text()
    # the same slowdown where the CPU says bf16 is native: timed in rounds, not settled by the hardware
    ((_, native),) = list(PrecisionProbe().run(_ctx(BF16, _SlowBf16)))
    assert native.runs >= 3 and "settled" not in native.extra and native.hardware is None


def test_a_probe_whose_rounds_cannot_fit_its_share_of_the_time_is_not_timed():
    ctx = _ctx(AVX2)
    ctx.deadline = time.perf_counter() + 0.05
    calls = []

    def slow(name):
        def run():
            calls.append(name)
            time.sleep(0.03)
        return run
    with pytest.raises(ProbeSkip, match="not timed: a round of its variants took"):
        ctx.compare(what="two sleeps", baseline="a", variants={"a": slow("a"), "b": slow("b")})
    assert calls == ["a", "b"]  # the first calls only: no warm-up, no round past the deadline
    known = slow("a")
    known.cost = 2.0  # what the observed steps say one call takes: too much for the time left, say so before calling
    ctx.deadline = time.perf_counter() + 5.0
    with pytest.raises(ProbeSkip, match="should take about 2.00 s"):
        ctx.compare(what="two sleeps", baseline="a", variants={"a": known, "b": slow("b")})
    assert calls == ["a", "b"]


def test_probes_use_the_last_full_batch_not_the_short_last_batch_of_an_epoch():
    """What the probes copy: the last training batch of the largest size seen, so an epoch's
    short last batch (8 of 32 here) never becomes the probes' batch; kept detached, so the doctor
    holds no step's graph (torchdiffeq wraps the model anew at every solve: one kept batch per
    wrapper kept every step's graph alive, and PIT202 blamed the script)."""
    from pitstop.doctor.record.passes import Passes
    from pitstop.doctor.run.spec import StepRecord

    passes, model = Passes(lambda *a: None), nn.Linear(8, 2)
    scale = torch.ones(8, requires_grad=True)  # the input comes out of autograd, like an ODE solver's state
    records = []
    for i, n in enumerate([32, 32, 8, 32, 8]):
        x = torch.randn(n, 8) * scale
        out = model(x)
        passes.watch(model, (x,), {}, out, 0.0, "train.py:1", 0.0, None)
        out.sum().backward()
        rec = StepRecord(index=i, kind="observed", wall=0.1)
        passes.settle(rec, records)
        records.append(rec)
        kept = passes.last_train_args[id(model)][0]
        assert kept.shape[0] == 32 and kept.grad_fn is None  # kept detached: no step's graph held by the doctor
    assert passes.last_train_args[id(model)][0].shape[0] != x.shape[0]  # the last step's 8 samples were not kept


class _LstmLM(nn.Module):
    """yunjey/pytorch-tutorial's language model, small: the hidden state is an argument."""

    def __init__(self):
        super().__init__()
        self.embed, self.lstm, self.out = nn.Embedding(50, 8), nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 50)

    def forward(self, x, h):
        y, h = self.lstm(self.embed(x), h)
        return self.out(y.reshape(-1, 16)), h


def test_a_probe_keeps_the_whole_batch_when_the_batch_size_also_sits_in_another_argument_s_dimension():
    """An LSTM's (h, c) hold the batch in dim 1 while the input holds it in dim 0: cutting the
    input to 16 of 20 samples would break the call, so the probe times all 20."""
    model, x = _LstmLM(), torch.randint(0, 50, (20, 5))
    state = (torch.zeros(1, 20, 16), torch.zeros(1, 20, 16))
    obs = Observations(steps_observed=4, step_time=StepTime(mean=0.01, median=0.01),
                       breakdown=Breakdown(forward=0.004, backward=0.005, other=0.001))
    ctx = ProbeContext(obs, model=model, args=(x, state), compiled=False, optimizers=[], cpu=AVX2, budget_s=0.01)
    assert ctx.samples() == 20 and "of the batch" not in ctx.describe(model, ctx.batch())
    model.last_loss = model(x, state)[0].mean()  # llama2.c keeps its loss on the module: a non-leaf attribute
    ctx.fwd_bwd(ctx.model_copy(), ctx.batch())()  # copied (the attribute detached) and run: shapes agree


# -- runs ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_threads_beside_a_busy_core_are_pit108_with_the_wait_measured_and_sleeping_workers_leave_the_busy_note(
        warm_doctor):
    """2 intra-op threads on the machine's cores beside a process that spins on one of them (and
    whatever else this machine runs): the threads wait for a core, PIT108 says how long and how
    many threads fit; the DataLoader's two workers sleep, so they do not count as the run's load.
    One thread beside the same spinner fits: no PIT108. (No probes: the threads probe's verdict
    on such a step depends on the moment; its decision rule is checked on synthetic results.)"""
    spinner = subprocess.Popen(default_signals([sys.executable, "-c", "while True: pass"]))
    try:
        loaded = warm_doctor.report(DOCTOR / "threads_loaded.py", "--threads", "2", steps=4, warmup=1,
                                    probes=False).data
        single = warm_doctor.report(DOCTOR / "threads_loaded.py", "--threads", "1", steps=4, warmup=1,
                                    probes=False).data
    finally:
        spinner.kill()
        spinner.wait()
    cpu = loaded["observations"]["cpu"]
    assert cpu["threads_busy"] >= 2 and cpu["wait_share"] >= 0.10 and cpu["others_cores"] >= 0.5, cpu
    assert cpu["workers"] == 2 and cpu["workers_cores"] < 0.2 and cpu["own_threads"] < 2.5, cpu  # by CPU use
    f = next(f for f in loaded["findings"] if f["code"] == "PIT108")
    assert "waited for a core" in f["evidence"] and "torch.set_num_threads(1)" in f["fix"]
    # the measured wait, without the probe; an impact is never more than the step (a busy machine
    # can make the threads wait longer than the step lasts: 1.32 measured in a whole-suite run)
    assert f["impact"]["share"] == pytest.approx(min(cpu["wait_share"], 1.0))
    assert any(n.startswith("the machine was busy") and "other processes kept" in n for n in loaded["notes"])
    assert "PIT108" not in {f["code"] for f in single["findings"]}
    assert single["observations"]["settings"]["num_threads"] == 1


@pytest.mark.slow
def test_an_evaluation_in_the_warm_up_is_timed_and_amortised_over_the_period_its_guard_says(warm_doctor):
    from pitstop.report.doctor_terminal import periodic_lines

    d = warm_doctor.report(DOCTOR / "periodic_eval.py", "--eval-every", "40", "--eval-batches", "60", steps=5,
                           warmup=2, probes=False).data
    assert d["breakdown"]["eval"]["seconds"] == 0.0  # the observed steps saw no evaluation
    work = {w["kind"]: w for w in d["observations"]["periodic"]}
    ev, ck = work["eval"], work["checkpoint"]
    assert ev["steps"] == [0] and ev["in_warmup"] == 1 and ev["in_observed"] == 0 and ev["period"] == 40
    assert "step % args.eval_every == 0" in ev["period_how"] and "args.eval_every = 40" in ev["period_how"]
    assert re.search(r"periodic_eval\.py:\d+$", ev["where"]) and ck["period"] == 40
    step = d["step_time"]["mean"]
    assert ev["seconds"] > step and ev["share"] == pytest.approx(ev["seconds"] / 40 / step, rel=0.05)
    obs = Observations.from_dict(d["observations"])
    line = next(x for x in periodic_lines(obs) if x.startswith("evaluation"))
    assert "every 40 steps" in line and "% of training at this step time" in line and "1 in the warm-up" in line


@pytest.mark.slow
def test_sites_under_a_framework_call_name_the_runner_s_line_with_the_user_s_line_as_via(warm_doctor, tmp_path):
    lib = tmp_path / "lib"  # outside the project (the script's folder, the working directory): a library
    lib.mkdir()
    shutil.copy(DOCTOR / "runner_lib" / "minitrainer.py", lib / "minitrainer.py")
    # 20 steps (~70 ms of the runner's collation): with 6, a whole-suite run once sampled nothing
    d = warm_doctor.report(DOCTOR / "trainer_style.py", "--lib", str(lib), steps=20, warmup=1, probes=False).data
    assert d["status"] == "stopped", d["message"]
    fit_line = next(i for i, text in enumerate((DOCTOR / "trainer_style.py").read_text().splitlines(), 1)
                    if "the framework call" in text)
    sampled = d["observations"]["host_sites"] + d["observations"]["other_sites"]
    assert sampled, d["observations"]
    for s in sampled:
        assert "minitrainer.py:" in s["where"], s
        assert s["via"].endswith(f"trainer_style.py:{fit_line}"), s
    syncs = d["observations"]["syncs"]
    assert syncs and all("minitrainer.py:" in s["where"] for s in syncs), syncs
