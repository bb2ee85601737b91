"""The doctor on hand-written loops (issue 15): training vs evaluation forwards, the batch
dimension, keyword batches, gradient accumulation, manual updates, host time, PIT101 from
what the cores did, and the report's wording. In-process runs (``pitstop.doctor``) and
synthetic observations: fast, no subprocess; the planted scripts run in
``test_doctor_planted_loops.py`` (slow)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import pitstop
from pitstop.doctor.analysis.diagnosis import diagnose
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord


def _run(step, steps=3, warmup=1, probes=False):
    return pitstop.doctor(step, steps=steps, warmup=warmup, probes=probes)


def _sgd_step(model):
    """A plain SGD training step on a random batch of 4x8 (for the probe tests)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def test_forward_with_grad_that_never_reaches_backward_is_evaluation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    val = torch.randn(512, 64)
    x = torch.randn(4, 64)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        model(val)  # validation with autograd on and dropout active

    r = _run(step)
    fw = r.observations.forwards
    assert fw.eval_with_grad >= 3 and fw.train_mode_eval >= 3
    assert fw.train >= 3
    assert r.observations.share("eval") > 0
    assert r.observations.batch_size == 4  # the validation batch (64) is not the training batch
    codes = [f.code for f in r.findings]
    assert codes[0] == "PIT803" and "PIT605" in codes
    pit605 = next(f for f in r.findings if f.code == "PIT605")
    assert "never reached a backward" in pit605.evidence


def test_eval_mode_forward_that_is_trained_is_not_evaluation():
    """model.eval() while training (frozen batch-norm statistics) is training when a backward follows."""
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)).eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = model(torch.randn(4, 8)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    r = _run(step)
    assert r.observations.forwards.eval_with_grad == 0
    assert "PIT605" not in {f.code for f in r.findings}


def test_gradient_accumulation_counts_every_micro_batch():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        for _ in range(4):
            (model(torch.randn(6, 8)).pow(2).mean() / 4).backward()
        opt.step()
        opt.zero_grad()

    r = _run(step)
    s = r.summary()
    assert r.observations.batch_size == 6
    assert s["samples_per_step"] == 24 and s["micro_batches_per_step"] == 4
    assert abs(s["samples_per_s"] - 24 * s["steps_per_s"]) < 1e-6


def test_sequence_first_batches_use_the_lstm_batch_dimension_and_count_tokens():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.rnn, self.out = nn.Embedding(50, 16), nn.LSTM(16, 16), nn.Linear(16, 50)

        def forward(self, x):
            return self.out(self.rnn(self.emb(x))[0])

    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        x = torch.randint(0, 50, (35, 20))  # seq_len x batch
        loss = model(x).float().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    r = _run(step, probes=True)
    b = r.observations.batch
    assert (b.size, b.dim, b.tokens) == (20, 1, 700)
    assert "LSTM" in b.how and "batch_first=False" in b.how
    assert r.summary()["tokens_per_s"] > 0
    probe = r.observations.probes["precision"]
    assert probe.error is None
    if probe.what is not None:  # the probe cut the batch dimension, not the time dimension
        assert "35x" in probe.what


def test_keyword_batches_give_batch_size_tokens_and_probes():
    class HF(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(40, 16), nn.Linear(16, 40)

        def forward(self, input_ids=None, attention_mask=None, labels=None):
            logits = self.head(self.emb(input_ids))
            return {"loss": nn.functional.cross_entropy(logits.view(-1, 40), labels.view(-1)), "logits": logits}

    model = HF()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        ids = torch.randint(0, 40, (5, 12))
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)["loss"].backward()
        opt.step()
        opt.zero_grad()

    r = _run(step, probes=True)
    b = r.observations.batch
    assert (b.size, b.input, b.tokens) == (5, "input_ids", 60)
    assert r.summary()["samples_per_s"] and r.summary()["tokens_per_s"]
    probe = r.observations.probes["precision"]
    assert probe.speedup is not None and "input_ids=" in probe.what


def test_manual_parameter_updates_make_backward_calls_the_steps():
    model = nn.Linear(8, 2)

    def step():
        model.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.1)

    r = _run(step)
    assert r.outcome == "diagnosed" and len(r.result.observed) == 3
    assert r.observations.step_boundary == "backward"
    assert any("manual update" in n for n in r.observations.notes)
    assert r.summary()["samples_per_step"] == 4


def test_accumulation_with_an_optimizer_is_not_taken_for_manual_updates():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def step():
        model(torch.randn(4, 8)).sum().backward()
        calls.append(1)
        if len(calls) % 5 == 0:
            opt.step()
            opt.zero_grad()

    r = _run(step)
    assert r.observations.step_boundary == "optimizer.step"
    assert r.summary()["micro_batches_per_step"] == 5


def _result(**obs) -> RunResult:
    spec = RunSpec(script="x.py", steps=2, warmup=0)
    steps = [StepRecord(index=i, kind="observed", wall=0.1) for i in range(2)]
    base = {"step_time": {"median": 0.1, "mean": 0.1, "p90": 0.1, "min": 0.1, "max": 0.1},
            "breakdown": {"data": 0.05, "forward": 0.02, "backward": 0.02, "optimizer": 0.01, "eval": 0.0,
                          "other": 0.0}, "steps_observed": 2, "device": "cpu",
            "settings": {"cpu_cores": 2, "num_threads": 2}}
    return RunResult(spec=spec, status="stopped", steps=steps, observations=Observations.from_dict({**base, **obs}))


def _pit101(**obs):
    d = diagnose(_result(**obs))
    assert d.errors == []
    return [f for f in d.findings if f.code == "PIT101"]


def test_pit101_idle_cores_during_the_wait_make_it_high_despite_busy_threads():
    loaders = [{"role": "train", "num_workers": 0, "where": "t.py:3"}]
    idle = _pit101(loaders=loaders, cpu={"data_wait_cpu_per_step": 0.004})[0]   # 0.08 CPU-s per s of wait
    busy = _pit101(loaders=loaders, cpu={"data_wait_cpu_per_step": 0.048})[0]   # CPU-bound wait
    assert idle.severity == "high" and "mostly idle" in idle.evidence
    assert busy.severity == "low" and "take cores from compute" in busy.evidence


def test_pit101_oversubscribed_workers_are_told_fewer_never_more():
    loaders = [{"role": "train", "num_workers": 4, "where": "t.py:3"}]
    cpu = {"workers_per_step": 0.005, "process_per_step": 0.19, "load_avg": 6.0, "own_threads": 6}
    (f,) = _pit101(loaders=loaders, cpu=cpu)
    assert "fewer workers" in f.fix and "num_workers=0" in f.fix and "more workers" not in f.fix.lower()
    heavy = {"workers_per_step": 0.15, "process_per_step": 0.19, "load_avg": 6.0, "own_threads": 6}
    (g,) = _pit101(loaders=loaders, cpu=heavy)
    assert "more workers" not in g.fix.lower() and g.severity == "low"
    # without CPU measurements the old advice stays, but never "more" beyond the spare cores
    (h,) = _pit101(loaders=loaders)
    assert "more workers" not in h.fix.lower()


def test_pit101_io_bound_workers_on_a_quiet_machine_get_more_workers():
    loaders = [{"role": "train", "num_workers": 2, "where": "t.py:3"}]
    cpu = {"workers_per_step": 0.01, "process_per_step": 0.05, "load_avg": 1.0, "own_threads": 3}
    (f,) = _pit101(loaders=loaders, cpu=cpu, settings={"cpu_cores": 8, "num_threads": 2})
    assert "more workers" in f.fix and "I/O" in f.title


def test_host_time_before_the_forward_is_reported_with_its_lines():
    br = {"data": 0.0, "host": 0.05, "forward": 0.02, "backward": 0.02, "optimizer": 0.01, "eval": 0.0, "other": 0.0}
    assert _pit101(breakdown={**br, "host": 0.001}, step_boundary="optimizer.step") == []  # below the floor
    (f,) = _pit101(breakdown=br, step_boundary="optimizer.step",
                   host_sites=[{"where": "train.py:120", "share": 0.9, "samples": 40}])
    assert "train.py:120" in f.evidence and f.where == ("train.py:120",)
    assert _pit101(breakdown=br, step_boundary="backward") == []  # manual updates live in host too


def test_workers_knob_tries_fewer_workers_when_the_loader_has_some():
    from pitstop.tune.knob import Context
    from pitstop.tune.knob import all_knobs

    knob = next(k for k in all_knobs() if k.tip == "PIT101")
    ctx = Context(cpu_count=2, loader_workers=4)
    assert knob.applies(ctx).ok
    assert knob.values(ctx) == [0, 1, 2]
    assert knob.recipe_fields(0, ctx) == {"num_workers": 0, "persistent_workers": False}
    assert "persistent_workers" not in knob.snippet(0, ctx)


def test_workers_knob_patch_lowers_worker_counts_and_drops_worker_only_options():
    from torch.utils.data import DataLoader

    from pitstop.tune import patch as patches
    from pitstop.tune.knob import all_knobs

    knob = next(k for k in all_knobs() if k.tip == "PIT101")
    try:
        knob.apply_in_child(0)
        loader = DataLoader(list(range(8)), batch_size=4, num_workers=4, persistent_workers=True, prefetch_factor=4)
        assert loader.num_workers == 0 and not loader.persistent_workers
    finally:
        patches.reset()


def test_busy_machine_note():
    from pitstop.doctor.record.cores import busy_note
    from pitstop.doctor.analysis.records import CpuRecord

    assert busy_note(CpuRecord(machine_cores=2, load_avg=6.0, own_threads=2)) is not None
    assert busy_note(CpuRecord(machine_cores=8, load_avg=2.0, own_threads=2)) is None
    assert "stolen" in busy_note(CpuRecord(machine_cores=8, load_avg=0.0, steal_share=0.2))


def test_html_text_has_no_raw_backticks_or_exponents():
    from pitstop.report.html import inline_code, stacked_bar

    assert inline_code("run `pitstop tune` <now>") == "run <code>pitstop tune</code> &lt;now&gt;"
    svg = stacked_bar("t", [("forward", 1660.0), ("backward", 12.34)], unit="ms").svg
    assert "e+0" not in svg and "1660 ms" in svg


def test_probe_row_explains_the_lower_bound_rule():
    from pitstop.doctor.analysis.probe_records import ProbeResult, Speedup
    from pitstop.doctor.analysis.probe import gate_note

    def probe(low: float) -> ProbeResult:
        return ProbeResult(candidate="bfloat16", speedups={"bfloat16": Speedup(ratio=1.54, low=low, high=2.1)},
                           confidence=0.9)

    note = gate_note(probe(0.98), 1.10)
    assert "lower bound 0.98x" in note and "1.10x" in note
    assert gate_note(probe(1.3), 1.10) == ""


@pytest.mark.slow  # torch.compile's first import takes seconds
def test_wrappers_are_looked_through_for_model_structure():
    from pitstop.doctor.record.wrappers import sequential_conv_bias_bn, unwrap, wrapper_chain

    net = nn.Sequential(nn.Conv2d(3, 4, 3, bias=True), nn.BatchNorm2d(4), nn.ReLU(),
                        nn.Conv2d(4, 4, 3, bias=False), nn.BatchNorm2d(4))
    for wrapped in (nn.DataParallel(net), torch.compile(net), nn.DataParallel(torch.compile(net))):
        assert unwrap(wrapped) is net
        assert wrapper_chain(wrapped)[-1] == "Sequential"
        assert sequential_conv_bias_bn(wrapped) == [["0", "1"]]
    assert wrapper_chain(net) == ["Sequential"]


def test_manual_updates_end_steps_in_light_mode_too():
    """tune's A/B trials run the light instrumentation: no forward hooks, the parameter
    to watch comes from the loss's graph."""
    from pitstop.doctor.record.instrument import Instrumentation

    model = nn.Linear(8, 2)
    inst = Instrumentation(3, 1, mode="light", stop=False).install()
    try:
        for _ in range(8):
            model.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
    finally:
        inst.uninstall()
    assert inst.boundary == "backward" and len(inst.records) >= 4


def test_primary_input_of_positional_keyword_and_nested_batches():
    from pitstop.doctor.record.batch import batch_info, primary_input

    x, ids = torch.randn(3, 5), torch.randint(0, 9, (4, 7))
    assert primary_input((x,), {})[0] == "argument 0"
    assert primary_input((), {"attention_mask": ids, "input_ids": ids})[0] == "input_ids"
    assert primary_input(((x, ids), 0), {}) == ("argument 0[0]", x)
    assert primary_input(({"input_ids": ids},), {})[1] is ids
    info = batch_info((ids,), {}, None)
    assert (info.size, info.dim, info.tokens) == (4, 0, 28)
    assert batch_info((x,), {}, None).tokens is None  # float features are not tokens


def test_unexplained_time_names_the_sampled_lines():
    br = {"data": 0.0, "host": 0.0, "forward": 0.02, "backward": 0.02, "optimizer": 0.01, "eval": 0.0, "other": 0.05}
    d = diagnose(_result(breakdown=br, other_sites=[{"where": "train.py:88", "share": 0.8, "samples": 30}]))
    f = next(f for f in d.findings if f.code == "PIT905")
    assert "train.py:88" in f.evidence and f.where == ("train.py:88",)


ONEDNN_LSTM = "could not create a primitive descriptor for the LSTM forward propagation primitive"


class _NoBf16Kernel(nn.Module):
    """Raises what oneDNN raises for a bf16 LSTM on a CPU without native bf16 (AMD EPYC, AVX2
    only), on every CPU: the failure path is tested wherever the suite runs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            raise RuntimeError(ONEDNN_LSTM)
        return self.lin(x)


def test_a_candidate_without_a_kernel_here_is_a_measured_fact_not_a_probe_error():
    import io

    from pitstop.report.doctor_terminal import render

    r = _run(_sgd_step(_NoBf16Kernel()), probes=True)
    probe = r.observations.probes["precision"]
    assert probe.error is None and probe.skipped is None
    assert probe.unavailable == {"bfloat16": f"RuntimeError: {ONEDNN_LSTM}"}
    assert probe.gain() is None and "PIT301" not in {f.code for f in r.findings}
    assert not any("precision" in e for e in r.errors)
    buf = io.StringIO()
    render(r, file=buf)
    text = " ".join(buf.getvalue().split())  # the console wraps long lines
    said = f"bfloat16 is not available for this model on this CPU (measured: its first call raised RuntimeError: {ONEDNN_LSTM})"
    assert text.count(said) == 1 and text.count("bfloat16") == 1
    assert r.to_dict()["observations"]["probes"]["precision"]["unavailable"]["bfloat16"].endswith(ONEDNN_LSTM)


@pytest.mark.parametrize("load", [0.0, 0.5])
def test_a_probe_run_decides_quiet_or_busy_once_and_says_it_once(monkeypatch, load):
    """One decision per probe run, made before timing: the result never says both 'the
    machine is quiet' and 'the machine is busy' (the load is planted, not measured)."""
    import json

    from pitstop.doctor.record.probing import run as probes
    from pitstop.jsoncodec import to_json

    import dataclasses

    first = probes.first_calls  # the load is read with the first call of every variant
    monkeypatch.setattr(probes, "first_calls", lambda *a, **k: dataclasses.replace(first(*a, **k), load=load))
    r = _run(_sgd_step(nn.Linear(8, 8)), probes=True)
    # PIT108's threads probe decides on wall time whatever the load (it changes the thread count)
    timed = [p for k, p in r.observations.probes.items() if p.speedups and k != "threads"]
    assert timed
    for p in timed:
        text = json.dumps(to_json(p))
        assert ("quiet" in text) != ("busy" in text), text
        assert {s.measure for s in p.speedups.values()} == {"wall" if load == 0.0 else "cpu"}
        assert "single_threaded" not in p.extra
