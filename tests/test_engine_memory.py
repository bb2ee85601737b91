"""PhaseMemory: memory per phase of chosen optimizer steps (PIT405), measured, hooks cleaned up."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from engine_helpers import ce, data, loader, mlp
from pitstop.engine import FitState, PhaseMemory, Recipe, fit

CPU = Recipe(device="cpu")


def adam_run(batch_size: int = 8, steps=(1, 2), recipe: Recipe = CPU, max_steps: int = 3, loss_fn=ce, mem=None):
    model = mlp(features=64, hidden=256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    mem = mem or PhaseMemory(steps=steps)
    fit(model, opt, loss_fn, loader(data(256, features=64), batch_size), recipe=recipe, max_steps=max_steps,
        callbacks=[mem], progress=False)
    return model, opt, mem


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def no_hooks(model, opt) -> bool:
    return not (model._forward_hooks or model._forward_pre_hooks or opt._optimizer_step_pre_hooks
                or opt._optimizer_step_post_hooks) and not _get_current_dispatch_mode_stack()


def test_adam_state_appears_in_the_first_optimizer_step_only():
    model, opt, mem = adam_run(steps=(1, 2))
    p = param_bytes(model)
    first, second = mem.phases
    assert (first["step"], second["step"]) == (1, 2)
    assert first["device"] == "cpu" and "MemTracker" in first["method"] and mem.skipped is None
    assert all(isinstance(first[k], int) for k in ("forward_peak", "backward_peak", "optimizer_peak", "held_after"))
    # step 1 creates exp_avg and exp_avg_sq: two more copies of the parameters stay held
    assert abs((first["held_after"] - first["start"]) - 2 * p) < 0.01 * p
    assert first["optimizer_peak"] - first["before_optimizer"] >= 2 * p
    # step 2 allocates no new state: it ends where it started
    assert abs(second["held_after"] - second["start"]) < 0.01 * p
    assert second["start"] - first["start"] >= 2 * p
    # the backward holds the gradients (one more copy of the parameters) before the optimizer runs
    assert second["before_optimizer"] - second["start"] >= p
    assert first["forward_peak"] > first["start"] and first["backward_peak"] > first["start"]
    table = mem.report()
    assert "forward" in table and "held after" in table and len(table.splitlines()) == 4
    assert no_hooks(model, opt)


def test_forward_peak_grows_with_the_batch_size():
    act = {}
    for bs in (8, 64):
        _, _, mem = adam_run(batch_size=bs, steps=(2,))
        (rec,) = mem.phases
        act[bs] = rec["forward_peak"] - rec["start"]
    assert act[8] > 0
    assert act[64] > 4 * act[8]  # activations scale with the batch (8x here; bound kept loose)


def test_accumulation_micro_batches_are_counted():
    model, opt, mem = adam_run(steps=(2,), recipe=Recipe(device="cpu", accumulate=2))
    (rec,) = mem.phases
    assert rec["step"] == 2 and rec["micro_batches"] == 2
    assert rec["backward_peak"] >= rec["before_optimizer"] >= rec["start"] + param_bytes(model)  # grads held
    assert no_hooks(model, opt)


def test_hooks_are_gone_after_the_last_chosen_step_even_when_fit_raises_later():
    calls = {"n": 0}

    def failing(model, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom at step 3")
        return ce(model, batch)

    model = mlp(features=64, hidden=256)
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    mem = PhaseMemory(steps=(1,))
    with pytest.raises(RuntimeError, match="boom"):
        fit(model, opt, failing, loader(data(64, features=64), 8), recipe=CPU, max_steps=5, callbacks=[mem],
            progress=False)
    assert [r["step"] for r in mem.phases] == [1]
    assert not mem.active and no_hooks(model, opt)


def test_the_with_form_removes_hooks_when_fit_raises_inside_a_measured_step():
    model = mlp(features=64, hidden=256)
    opt = torch.optim.Adam(model.parameters(), foreach=False)

    def failing(model, batch):
        model(batch[0])  # the forward runs (hooks fire, the CPU tracker is live), then the loss fails
        raise RuntimeError("bad loss")

    with PhaseMemory(steps=(1, 2)) as mem:
        with pytest.raises(RuntimeError, match="bad loss"):
            fit(model, opt, failing, loader(data(64, features=64), 8), recipe=CPU, max_steps=3, callbacks=[mem],
                progress=False)
        assert not mem.active and no_hooks(model, opt)  # fit's on_exception released them
    assert not mem.active and no_hooks(model, opt) and mem.phases == []
    torch.ones(3) * 2  # no tracker left on the dispatch stack


def test_fit_raising_inside_a_measured_step_releases_the_hooks_without_the_with_form():
    model = mlp(features=64, hidden=256)
    opt = torch.optim.Adam(model.parameters(), foreach=False)

    def failing(model, batch):
        model(batch[0])
        raise RuntimeError("bad loss")

    mem = PhaseMemory(steps=(1, 2))
    with pytest.raises(RuntimeError, match="bad loss"):
        fit(model, opt, failing, loader(data(64, features=64), 8), recipe=CPU, max_steps=3, callbacks=[mem],
            progress=False)
    assert not mem.active and no_hooks(model, opt)
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    assert _get_current_dispatch_mode_stack() == []  # the CPU tracker was left


def test_evaluation_forwards_between_steps_are_not_measured():
    model = mlp(features=64, hidden=256)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = PhaseMemory(steps=(1, 2))
    fit(model, opt, ce, loader(data(64, features=64), 8), recipe=CPU, max_steps=3, callbacks=[mem], progress=False,
        eval_loader=loader(data(32, features=64), 8), eval_every=1)
    assert [r["micro_batches"] for r in mem.phases] == [1, 1]
    assert no_hooks(model, opt)


def test_allocator_method_skips_cleanly_on_cpu_with_a_reason():
    with pytest.warns(UserWarning, match="allocator counters need an accelerator"):
        model, opt, mem = adam_run(recipe=CPU, mem=PhaseMemory(method="allocator"))
    assert mem.phases == [] and "this run is on cpu" in mem.skipped
    assert mem.report().startswith("phase memory: skipped")
    assert no_hooks(model, opt)


def test_compiled_model_on_cpu_is_skipped_not_guessed():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = PhaseMemory(steps=(1,))
    state = FitState(model=model, train_model=model, optimizer=opt, recipe=Recipe(device="cpu", compile="default"))
    with pytest.warns(UserWarning, match="compiled model"):
        mem.on_fit_start(state)  # what fit calls first; compiling itself is not needed to decide
    assert mem.phases == [] and "MemTracker" in mem.skipped and no_hooks(model, opt)


def test_steps_not_reached_and_bad_arguments():
    _, _, mem = adam_run(steps=(7,), max_steps=2)
    assert mem.phases == [] and "not reached" in mem.report()
    with pytest.raises(ValueError, match="steps must be ints >= 1"):
        PhaseMemory(steps=(0,))
    with pytest.raises(ValueError, match="method must be one of"):
        PhaseMemory(method="rss")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA allocator counters need a CUDA device")
def test_cuda_allocator_counters_split_the_phases():
    _, _, mem = adam_run(recipe=Recipe(device="cuda"), steps=(1, 2))
    model = mlp(features=64, hidden=256)
    p = param_bytes(model)
    first, second = mem.phases
    assert first["device"] == "cuda" and "max_memory_allocated" in first["method"]
    assert first["held_after"] - first["start"] >= 2 * p  # Adam state, rounded up by the allocator
    assert second["held_after"] - second["start"] < p
