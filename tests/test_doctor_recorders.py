"""The doctor's recorders in isolation, fed synthetic events (no script, no child process)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from pitstop.doctor.record.boundaries import ManualUpdates
from pitstop.doctor.record.closures import wrap_closure
from pitstop.doctor.record.loaders import LoaderObserver
from pitstop.doctor.record.memory import MemoryRecorder
from pitstop.doctor.record.passes import Passes
from pitstop.doctor.record.patching import Patches
from pitstop.doctor.record.profiled import ProfiledStep
from pitstop.doctor.record.steps import StepLog, plan_of
from pitstop.doctor.record import syncs
from pitstop.doctor.record.syncs import SyncRecorder


def _log(steps: int = 2, warmup: int = 1, full: bool = False) -> StepLog:
    log = StepLog(plan_of(steps, warmup, full=full, traced=0))
    log.start()
    return log


def _end(log: StepLog):
    rec = log.close()
    log.append(rec)
    return rec


def test_step_log_follows_the_plan_and_keeps_phases_and_losses():
    log = _log(steps=2, warmup=1, full=True)
    assert log.total == 5 and log.steps == 2
    # the last observed step is followed by a bare one (hooks off: the doctor's own overhead)
    assert [log.kind(i) for i in range(6)] == ["warmup", "observed", "observed", "bare", "profiled", None]
    log.cur.phases["forward"] += 0.5
    log.cur.losses.append(torch.tensor(2.0))
    log.cur.losses.append(torch.tensor(1.0))
    rec = _end(log)
    assert (rec.index, rec.kind, rec.phases) == (0, "warmup", {"forward": 0.5})
    assert log.cur.phases == {} and log.observed == 0
    _end(log)
    assert not log.quiet
    _end(log)
    assert log.observed == 2 and not log.finished and log.quiet  # the bare step runs quiet
    _end(log)
    assert not log.quiet
    _end(log)
    assert log.finished and [r.kind for r in log.records] == ["warmup", "observed", "observed", "bare", "profiled"]
    log.read_losses()
    assert log.records[0].loss == 3.0 and log.records[1].loss is None


def test_step_log_restart_keeps_only_what_came_after_the_mark():
    log = _log()
    log.cur.phases["forward"] += 1.0
    log.cur.phases["data"] += 0.25
    mark = dict(log.cur.phases)
    log.cur.phases["forward"] += 0.5
    log.cur.losses.append(torch.tensor(1.0))
    log.restart(log.step_start, log.cpu_start, mark)
    assert log.cur.phases == {"forward": 0.5} and log.cur.losses == []


class _Fake:
    passive = False
    busy = 0
    in_opt = 0
    in_backward = False


def test_sync_recorder_counts_the_scripts_syncs_per_site_and_step():
    log, gates = _log(), _Fake()
    rec = SyncRecorder(log, gates, gates)
    rec.on_sync("item", "train.py:3", 0.25)
    rec.on_sync("item", "train.py:3", 0.25)
    gates.busy = 1
    rec.on_sync("item", "loader.py:9", 1.0)  # inside a DataLoader fetch: not the script's
    gates.busy, gates.in_opt = 0, 1
    rec.on_sync("item", "optim.py:1", 1.0)   # inside optimizer.step: not the script's
    rec.on_cuda_call("cuda.synchronize", "train.py:4", 0.0)
    gates.in_opt = 0
    rec.on_cuda_call("cuda.synchronize", "train.py:5", 0.125)
    assert log.cur.phases["sync"] == 0.625
    rec.fold()
    rec.new_step()
    rec.on_sync("item", "train.py:3", 0.5)
    rec.fold()
    assert rec.sites == {("train.py:3", "item"): [3, 2, 1.0], ("train.py:5", "cuda.synchronize"): [1, 1, 0.125]}
    # the CUDA call sites keep their seconds too (PIT203's live evidence said 0.0 ms before)
    assert rec.cuda_sites == {("train.py:5", "cuda.synchronize"): [1, 1, 0.125]}
    rec.new_step()
    rec.on_cuda_call("cuda.synchronize", f"{syncs.__file__}:40", 1.0)  # the doctor's own line: not counted
    rec.fold()
    assert rec.cuda_sites == {("train.py:5", "cuda.synchronize"): [1, 1, 0.125]}


def test_passes_decide_training_and_evaluation_forwards():
    counted: list[tuple[int, str]] = []
    passes = Passes(lambda mid, kind, where: counted.append((mid, kind)))
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    log = _log(steps=3, warmup=0)
    # step 0: one trained forward, one forward with gradients that no backward reaches
    out = model(x)
    passes.watch(model, (x,), {}, out, 0.25, "t.py:1", 0.125, None)
    passes.watch(model, (x,), {}, model(x), 0.5, "t.py:2", 0.0, None)
    out.sum().backward()
    log.cur.phases["forward"] += 0.75
    rec0 = log.close()
    passes.settle(rec0, log.records)
    log.append(rec0)
    assert counted == [(id(model), "train")]
    assert rec0.batch_size == 4 and passes.batch_size == 4 and rec0.phases["host"] == 0.125
    assert passes.per_step == {0: {id(model): [4, 0, 1]}}
    # step 1: the carried forward never met a backward: evaluation, its time moves to 'eval'
    rec1 = log.close()
    passes.settle(rec1, log.records)
    assert counted[1:] == [(id(model), "eval_with_grad"), (id(model), "train_mode_eval")]  # nn.Linear trains
    assert (rec0.phases["forward"], rec0.phases["eval"]) == (0.25, 0.5)
    passes.watch(model, (x,), {}, model(x), 0.5, "t.py:3", 0.0, None)
    passes.settle_all(log.records)  # a step that never ended: counted, no record edited
    assert counted[-2:] == [(id(model), "eval_with_grad"), (id(model), "train_mode_eval")]


def test_manual_updates_are_found_only_when_the_parameter_changed():
    p = nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    watch = ManualUpdates()
    assert watch.changed() is None
    watch.snapshot(p, {"forward": 1.0})
    assert watch.changed() is None  # gradient accumulation: unchanged
    with torch.no_grad():
        p.add_(p.grad, alpha=-0.1)
    mark = watch.changed()
    assert mark is not None and mark[2] == {"forward": 1.0} and watch.snap is None


def test_closure_wrapper_reports_its_time_and_keeps_the_result():
    events: list[str] = []
    opt = object()
    args, kwargs = wrap_closure(opt, (opt,), {"closure": lambda: 7}, lambda: events.append("enter"),
                                lambda key, s: events.append(("leave", key, s >= 0)))
    assert kwargs["closure"]() == 7 and events == ["enter", ("leave", id(opt), True)]
    assert wrap_closure(opt, (opt,), {}, lambda: None, lambda k, s: None) is None


def test_loader_observer_times_waits_and_records_settings():
    from torch.utils.data import DataLoader, TensorDataset

    log = _log(steps=2, warmup=0)
    data = LoaderObserver(log)
    original = DataLoader.__iter__
    patches = Patches()
    data.install(patches)
    try:
        loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4)
        with torch.no_grad():
            list(loader)
        assert list(data.loaders.values())[0]["role"] == "eval" and log.cur.phases["data"] == 0
        batches = list(loader)
    finally:
        patches.restore()
    assert len(batches) == 2 and DataLoader.__iter__ is original
    info = list(data.loaders.values())[0]
    assert (info["role"], info["batch_size"], info["num_workers"]) == ("train", 4, 0)
    assert log.cur.phases["data"] > 0 and log.cur.phases["eval"] > 0 and data.busy == 0
    data.end_step("observed")
    assert data.data_cpu == [data.step_cpu]
    data.new_step()
    assert data.step_cpu == 0.0


def test_memory_recorder_counts_saved_activations_not_parameters():
    log = _log(steps=1, warmup=0, full=True)
    memory = MemoryRecorder(log, cuda=False)
    model = nn.Linear(64, 64, bias=False)
    memory.add_params(model)
    backward = SimpleNamespace(in_backward=False)
    memory.install(backward)
    try:
        x = torch.randn(16, 64, requires_grad=True)
        y = torch.tanh(model(x))  # saves x (input to the matmul) and the tanh output
        y.sum().backward()
    finally:
        memory.uninstall()
    memory.end_step("observed")
    assert memory.activations and memory.activations[0] >= 2 * 16 * 64 * 4
    assert memory.activations[0] < 2 * 16 * 64 * 4 + 64 * 64 * 4  # the weight is not an activation
    memory.watch_loss(y)
    memory.census(1, 1)
    assert memory.graph["steps"] == [1] and memory.graph["losses_tracked"] == 0


def test_profiled_step_counts_flops_of_its_step_only():
    notes: list[str] = []
    model = nn.Linear(8, 8)
    seen = SimpleNamespace(live_models=lambda: [model], any_compiled=lambda: False)
    prof = ProfiledStep(notes, None)
    prof.transition("observed", "profiled", seen)
    assert prof.flow is not None and prof.flow.names[id(model)] == "Linear"
    model(torch.randn(4, 8))
    prof.transition("profiled", None, seen)
    assert prof.result["flops"] == 2 * 4 * 8 * 8 and prof.result["kernels"]["matmul"]
    # a script that compiles: the step runs under the force_eager stance (a dispatch mode met by
    # dynamo would make it run the user's compiled code eagerly for the rest of the run)
    compiled = SimpleNamespace(live_models=lambda: [model], any_compiled=lambda: True)
    prof = ProfiledStep(notes, None)
    prof.transition("observed", "profiled", compiled)
    model(torch.randn(4, 8))
    prof.transition("profiled", None, compiled)
    assert prof.result["flops"] == 2 * 4 * 8 * 8 and "force_eager" in notes[-1]


def test_instrumentation_routes_each_step_to_its_recorders():
    from torch.utils.data import DataLoader, TensorDataset

    from pitstop.doctor.record.instrument import Instrumentation

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    inst = Instrumentation(3, 1, mode="full", stop=False).install()
    try:
        for (x,) in loader:
            with torch.no_grad():
                model(x)  # an evaluation forward
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # one sync per step, on this line
            if inst.finished:
                break
    finally:
        inst.uninstall()
    assert [r.kind for r in inst.records] == ["warmup", "observed", "observed", "observed", "bare", "profiled"]
    assert all(r.batch_size == 8 and r.phases["forward"] > 0 and r.phases["data"] > 0 for r in inst.records
               if r.kind != "bare")
    assert inst.records[4].phases.keys() <= {"backward", "optimizer"}  # bare: only the step boundaries ran
    [((site, kind), (calls, steps, _))] = inst.sync_sites.items()
    assert kind == "item" and site.endswith(f"test_doctor_recorders.py:{_line('loss.item()  # one sync')}")
    assert (calls, steps) == (3, 3)
    assert inst.forwards["train"] == 5 and inst.forwards["eval_no_grad"] == 5 and inst.batch_size == 8
    assert [d["role"] for d in inst.loaders.values()] == ["train"]
    assert len(inst.activations) == 2 and inst.graph["steps"] == [2, 3, 4] and inst.grad_bytes > 0  # ACTIVATION_STEPS
    assert inst.boundary == "optimizer.step" and inst.primary is opt and inst.backward_total == 6
    assert inst.profile_result["flops"] > 0 and inst.profiled.flow is not None
    assert len(inst.data_cpu) == 3


def _line(needle: str) -> int:
    from pathlib import Path

    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, t in enumerate(lines, 1) if needle in t and "_line(" not in t)


def test_patched_syncs_read_no_doctor_state_while_dynamo_traces(monkeypatch):
    """Dynamo guards on every attribute a traced function reads: a patched ``Tensor.item`` that
    read ``log.quiet`` while traced recompiled the user's graph when the bare steps flipped it
    (issue 39: 10 compilations of item_branch.py under the doctor, 9 with the check first)."""

    class Trap:
        @property
        def quiet(self):
            raise AssertionError("the doctor's state was read while dynamo traced")

    monkeypatch.setattr(syncs, "compiling_check", lambda: (lambda: True))
    calls = []
    wrapped = syncs._wrap_method(lambda t: calls.append(t) or 1.0, "item", lambda *a: None, Trap(),
                                 counts=lambda: (_ for _ in ()).throw(AssertionError("counts read")))
    assert wrapped(torch.tensor(1.0)) == 1.0 and len(calls) == 1


def test_the_profiled_step_data_flow_finds_linear_pairs_and_keeps_no_output_alive():
    """DataFlow (the profiled step's layer-to-layer flow) saw the last leaf's output through a
    strong reference, kept after the run: on an H200 a GPT's logits (13.7 GiB) stayed alive into
    the doctor's traced step, which ran out of memory where the script alone did not."""
    import gc
    import weakref

    import torch
    from torch import nn

    from pitstop.doctor.record.profiled import DataFlow

    fc1, fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
    flow = DataFlow({id(fc1): "fc1", id(fc2): "fc2"})
    x = torch.randn(2, 8)
    h = fc1(x)
    flow.post(fc1, h)
    flow.pre(fc2, (h,))
    assert flow.linear_linear and flow.linear_linear[0]["pair"] == ["fc1", "fc2"]
    out = fc2(h)
    flow.post(fc2, out)
    gone = weakref.ref(out)
    del out
    gc.collect()
    assert gone() is None, "the data flow kept the last layer's output alive"
    flow.pre(fc1, (torch.randn(2, 8),))  # the output is gone: nothing to match, no error
    assert len(flow.linear_linear) == 1
    flow.post(fc1, (h, h))  # a tuple output: nothing kept
    assert flow.last is None
