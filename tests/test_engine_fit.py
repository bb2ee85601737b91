"""fit: step counting, evaluation mode, NaN handling, callbacks, argument errors, loaders."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler

from engine_helpers import ce, data, loader, twins
from pitstop.engine import Callback, NonFiniteLossError, Recipe, fit, make_loader
from pitstop.engine.checkpoint import list_checkpoints
from pitstop.engine.data import CudaPrefetcher, adapt_loader, micro_batches
from pitstop.engine.distributed import DistInfo


def test_max_steps_counts_optimizer_steps_and_epochs_count_passes():
    model, opt, _, _ = twins()
    r = fit(model, opt, ce, loader(data(80), 8), recipe=Recipe(accumulate=3), max_steps=5, progress=False)
    assert (r.steps, r.epochs, r.samples) == (5, 1, 104)  # 10 micro-batches = 4 steps per epoch (3+3+3+1), then 3
    r = fit(model, opt, ce, loader(data(80), 8), recipe=Recipe(accumulate=3), epochs=2, progress=False)
    assert (r.steps, r.epochs, r.samples) == (8, 2, 160)


class Watch(Callback):
    def __init__(self):
        self.modes, self.events = [], []

    def on_fit_start(self, state):
        self.events.append("start")

    def on_step_end(self, state, loss):
        self.modes.append(state.model.training)

    def on_eval(self, state, metrics):
        self.events.append(("eval", state.step))

    def on_log(self, state, record):
        self.events.append(("log", record["step"]))

    def on_fit_end(self, state, result):
        self.events.append("end")


def test_callbacks_given_as_a_generator_are_all_called():
    model, opt, _, _ = twins()
    watches = [Watch(), Watch()]
    fit(model, opt, ce, loader(data(32), 8), recipe=Recipe(), epochs=1, callbacks=(w for w in watches),
        progress=False)
    assert all(w.events[0] == "start" and w.events[-1] == "end" and len(w.modes) == 4 for w in watches)


def test_eval_runs_in_inference_mode_and_eval_mode_then_training_resumes():
    model, opt, _, _ = twins()
    model.eval()  # fit trains in train mode whatever it was given
    seen = []

    def eval_fn(m, batch):
        seen.append((torch.is_inference_mode_enabled(), m.training))
        x, y = batch
        out = m(x)
        return {"loss": F.cross_entropy(out, y), "acc": (out.argmax(1) == y).float().mean()}

    watch = Watch()
    r = fit(model, opt, ce, loader(data(64), 8), recipe=Recipe(), epochs=2, eval_loader=loader(data(32, seed=5), 16),
            eval_fn=eval_fn, eval_every=3, log_every=4, callbacks=[watch], progress=False)
    assert seen and all(s == (True, False) for s in seen)
    assert watch.modes == [True] * 16 and model.training
    assert [s for s, _ in r.evals] == [3, 6, 9, 12, 15, 16]
    assert set(r.evals[-1][1]) == {"loss", "acc", "eval_seconds"} and 0 <= r.evals[-1][1]["acc"] <= 1
    assert watch.events[0] == "start" and watch.events[-1] == "end"
    assert ("log", 4) in watch.events and ("eval", 3) in watch.events


def test_eval_metrics_are_sample_weighted_means():
    model, opt, _, _ = twins()
    ds = data(40, seed=7)  # batches of 16, 16, 8
    r = fit(model, opt, ce, loader(data(8), 8), recipe=Recipe(), max_steps=1, eval_loader=loader(ds, 16), progress=False)
    model.eval()
    with torch.no_grad():
        expected = F.cross_entropy(model(ds.tensors[0]), ds.tensors[1]).item()
    assert r.evals[-1][1]["loss"] == pytest.approx(expected, rel=1e-5)


def nan_at(step_no: int, per_step: int = 1):
    calls = {"n": 0}

    def loss_fn(m, batch):
        calls["n"] += 1
        loss = ce(m, batch)
        if (calls["n"] - 1) // per_step + 1 == step_no:
            loss = loss * math.nan
        return loss
    return loss_fn


def test_nan_loss_raises_naming_the_step_and_no_checkpoint_holds_it(tmp_path):
    model, opt, _, _ = twins()
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at optimizer step 3 \(epoch 0\).*skip_nonfinite=True"):
        fit(model, opt, nan_at(3, per_step=2), loader(data(128), 8), recipe=Recipe(accumulate=2), epochs=1,
            checkpoint_dir=tmp_path, checkpoint_every=1, log_every=100, progress=False)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000002.pt", "step-000000001.pt"]


def test_skip_nonfinite_skips_the_step_and_goes_on():
    model, opt, _, _ = twins()
    snapshots = {}

    class Snap(Callback):
        def on_step_end(self, state, loss):
            snapshots[state.step] = [p.detach().clone() for p in state.model.parameters()]

    r = fit(model, opt, nan_at(3), loader(data(64), 8), recipe=Recipe(skip_nonfinite=True), epochs=1,
            callbacks=[Snap()], log_every=2, progress=False)
    assert r.steps == 8 and r.skipped == 1 and math.isfinite(r.last_loss)
    assert all(torch.equal(a, b) for a, b in zip(snapshots[2], snapshots[3]))  # step 3 skipped
    assert not all(torch.equal(a, b) for a, b in zip(snapshots[3], snapshots[4]))
    assert all(math.isfinite(p.sum().item()) for p in model.parameters())


@pytest.mark.parametrize("kwargs, match", [
    ({"recipe": {"precision": "fp32"}}, "recipe must be a pitstop Recipe"),
    ({"max_steps": 0}, "max_steps must be an int >= 1 or None, got 0"),
    ({"epochs": 1.5}, "epochs must be an int >= 1 or None, got 1.5"),
    ({"log_every": 0}, "log_every must be an int >= 1"),
    ({"callbacks": [print]}, "callbacks must be pitstop.engine.Callback instances"),
])
def test_bad_fit_arguments(kwargs, match):
    model, opt, _, _ = twins()
    args = {"recipe": Recipe(), "progress": False, **kwargs}
    with pytest.raises((TypeError, ValueError), match=match):
        fit(model, opt, ce, loader(data(16), 8), **args)


def test_any_iterable_of_batches_works():
    model, opt, _, _ = twins()
    batches = list(loader(data(40), 8))
    r = fit(model, opt, ce, batches, recipe=Recipe(accumulate=2), epochs=2, progress=False)
    assert (r.steps, r.samples) == (6, 80)


def test_micro_batch_weights_sum_to_one_per_group():
    batches = [(torch.zeros(n, 2),) for n in (8, 8, 8, 8, 8, 3)]
    groups, current = [], []
    for _, weight, boundary, n in micro_batches(iter(batches), 4):
        current.append((weight, n))
        if boundary:
            groups.append(current)
            current = []
    assert [len(g) for g in groups] == [4, 2]
    assert [w for w, _ in groups[0]] == [0.25] * 4
    assert [w for w, _ in groups[1]] == [8 / 11, 3 / 11]


def test_loaders_follow_the_recipe_and_shard_under_ddp():
    ds = data(40)
    made = make_loader(ds, 8, Recipe(num_workers=2, prefetch=3), shuffle=True)
    assert (made.num_workers, made.prefetch_factor, made.persistent_workers, made.pin_memory) == (2, 3, True, False)
    plain = loader(ds, 8, shuffle=True)
    assert adapt_loader(plain, Recipe(), device=torch.device("cpu"), dist=DistInfo()) is plain  # nothing to change
    rebuilt = adapt_loader(plain, Recipe(num_workers=1), device=torch.device("cpu"), dist=DistInfo())
    assert rebuilt is not plain and rebuilt.num_workers == 1 and rebuilt.batch_size == 8
    orders = []
    for rank in (0, 1):
        sharded = adapt_loader(plain, Recipe(seed=3), device=torch.device("cpu"), dist=DistInfo(rank, 2, rank))
        assert isinstance(sharded.sampler, DistributedSampler) and sharded.sampler.shuffle
        epochs = []
        for epoch in (0, 1):
            sharded.sampler.set_epoch(epoch)
            epochs.append(list(sharded.sampler))
        assert epochs[0] != epochs[1]  # set_epoch reshuffles (PIT703)
        orders.append(epochs[0])
    assert sorted(orders[0] + orders[1]) == list(range(40))  # disjoint shards covering the data


def test_cuda_prefetcher_is_refused_on_cpu_and_skipped_without_cuda():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        CudaPrefetcher([], torch.device("cpu"), lambda b: b)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the prefetcher's copy/compute overlap cannot run here")
    # big distinct items: a wait on the wrong copy (the event is re-recorded per item) shows as a wrong sum
    items = [(torch.full((1 << 22,), float(i)).pin_memory(), 1.0, True, 4) for i in range(6)]
    sums = [o[0].sum().item() for o in CudaPrefetcher(items, torch.device("cuda"),
                                                      lambda b: b.to("cuda", non_blocking=True))]
    assert sums == [float(i << 22) for i in range(6)]


def test_an_empty_loader_is_an_error_not_an_endless_loop():
    model, opt, _, _ = twins()
    batches = iter(list(loader(data(16), 8)))  # an iterator: exhausted after one epoch
    with pytest.raises(ValueError, match="yielded no batches in epoch 1"):
        fit(model, opt, ce, batches, recipe=Recipe(), max_steps=10, progress=False)


def test_resuming_with_another_recipe_warns_at_the_line_calling_fit(tmp_path):
    model, opt, _, _ = twins()
    fit(model, opt, ce, loader(data(64), 8), recipe=Recipe(), max_steps=2, checkpoint_dir=tmp_path, progress=False)
    with pytest.warns(UserWarning, match="differs from the checkpoint's in clip_norm") as warned:
        line = inspect.currentframe().f_lineno + 1
        result = fit(model, opt, ce, loader(data(64), 8), recipe=Recipe(clip_norm=1.0), max_steps=4,
                     checkpoint_dir=tmp_path, progress=False)
    assert result.resumed_from is not None and result.steps == 4
    hit = next(w for w in warned if "clip_norm" in str(w.message))
    assert (hit.filename, hit.lineno) == (__file__, line)  # the user's call, not pitstop's internals
