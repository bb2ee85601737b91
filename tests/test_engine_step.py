"""make_step: accumulation, precision, clipping, set_to_none, channels_last, activation
checkpointing, optimizer implementation, flags, bad losses, and no per-step host sync."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from engine_helpers import ce, data, loader, max_diff, mlp, twins
from pitstop.engine import LossError, Recipe, fit, make_step, switch_optimizer_impl
from pitstop.engine.prepare import optimizer_impl_of


@pytest.mark.parametrize("n", [88, 86])  # 88: a tail group of 3 full micro-batches; 86: and a ragged last one
def test_accumulation_equals_one_large_batch_including_the_epoch_tail(n):
    ds = data(n)
    a, opt_a, b, opt_b = twins()
    fit(a, opt_a, ce, loader(ds, 8), recipe=Recipe(accumulate=4), epochs=2, progress=False)
    fit(b, opt_b, ce, loader(ds, 32), recipe=Recipe(), epochs=2, progress=False)
    # 6 SGD steps, fp32: only summation order differs (mean of 4 means vs one mean)
    assert max_diff(a, b) < 1e-5
    # and the check can fail: without weighting the tail group, the result differs by far more
    c, opt_c, _, _ = twins()
    step = make_step(c, opt_c, ce, Recipe(accumulate=4))
    for _ in range(2):
        for batch in loader(ds, 8):
            step(batch)
        step.flush()
    assert max_diff(c, b) < 1e-5 if n == 88 else max_diff(c, b) > 1e-4


def test_make_step_accumulates_and_zeroes_only_at_the_boundary():
    ds = data(32)
    a, opt_a, b, opt_b = twins()
    step = make_step(a, opt_a, ce, Recipe(accumulate=4))
    batches = list(loader(ds, 8))
    for i, batch in enumerate(batches[:3]):
        step(batch)
        assert step.micro == i + 1
        assert all(p.grad is not None for p in a.parameters())  # accumulating, not zeroed (PIT801)
    assert max_diff(a, b) == 0  # no step yet
    step(batches[3])
    assert all(p.grad is None for p in a.parameters())  # set_to_none=True (PIT403)
    big = make_step(b, opt_b, ce, Recipe())
    big(next(iter(loader(ds, 32))))
    assert max_diff(a, b) < 1e-6


def test_returned_loss_is_detached_and_unweighted():
    model, opt, _, _ = twins()
    batch = next(iter(loader(data(8), 8)))
    expected = ce(model, batch).item()
    loss = make_step(model, opt, ce, Recipe(accumulate=4))(batch)
    assert not loss.requires_grad and loss.grad_fn is None
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_fp16_scaler_clipping_matches_fp32_clipping():
    ds = data(64)
    a, _, b, _ = twins()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    clip = 0.05  # far below the gradient norm (about 1): every step is clipped
    fp16 = make_step(a, opt_a, ce, Recipe(precision="fp16-mixed", clip_norm=clip))
    fp32 = make_step(b, opt_b, ce, Recipe(clip_norm=clip))
    assert fp16.precision.scaler.get_scale() == 65536.0
    before = [p.detach().clone() for p in a.parameters()]
    batches = list(loader(ds, 16))
    fp16(batches[0])
    moved = math.sqrt(sum(((p - q) ** 2).sum().item() for p, q in zip(a.parameters(), before)))
    # clipping after unscale_: the update is lr * clip_norm; clipping scaled grads would give lr * clip / 65536
    assert moved == pytest.approx(0.1 * clip, rel=1e-3)
    fp32(batches[0])
    for batch in batches[1:]:
        fp16(batch)
        fp32(batch)
    # fp16 autocast rounds activations to 11 significant bits; after 4 clipped steps of 0.005
    assert max_diff(a, b) < 2e-4


def test_inf_gradient_skips_the_step_and_lowers_the_scale():
    model, opt, _, _ = twins()
    step = make_step(model, opt, ce, Recipe(precision="fp16-mixed", clip_norm=1.0))
    scale = step.precision.scaler.get_scale()
    poison = {"on": True}
    first = next(model.parameters())
    first.register_hook(lambda g: g * math.inf if poison["on"] else g)
    before = [p.detach().clone() for p in model.parameters()]
    batch = next(iter(loader(data(16), 16)))
    loss = step(batch)
    assert math.isfinite(loss.item())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # step skipped
    assert step.precision.scaler.get_scale() == scale * 0.5  # backoff_factor
    assert all(p.grad is None for p in model.parameters())
    poison["on"] = False
    step(batch)
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_bf16_autocast_covers_forward_and_loss_but_not_backward():
    model, opt, _, _ = twins()
    seen = {}

    def loss_fn(m, batch):
        out = m(batch[0])
        seen["forward"] = out.dtype
        return F.cross_entropy(out, batch[1])

    def hook(grad):
        seen["backward_autocast"] = torch.is_autocast_enabled("cpu")

    next(model.parameters()).register_hook(hook)
    make_step(model, opt, loss_fn, Recipe(precision="bf16-mixed"))(next(iter(loader(data(8), 8))))
    assert seen == {"forward": torch.bfloat16, "backward_autocast": False}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_channels_last_applies_to_model_and_inputs():
    from pitstop.examples.models import make_cnn

    model = make_cnn(naive=False, width=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    first_conv = model.features[0]
    first_conv.register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
    images = torch.randn(4, 3, 16, 16)
    assert images.is_contiguous() and not images.is_contiguous(memory_format=torch.channels_last)
    make_step(model, opt, ce, Recipe(channels_last=True))((images, torch.tensor([0, 1, 2, 3])))
    assert seen == [True]
    assert first_conv.weight.is_contiguous(memory_format=torch.channels_last)


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 16)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x))


def test_activation_checkpointing_recomputes_and_keeps_gradients():
    def build():
        torch.manual_seed(0)
        return nn.Sequential(Counted(), nn.Linear(16, 4))

    batch = next(iter(loader(data(8), 8)))
    grads = {}
    for on in (False, True):
        model = build()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        step = make_step(model, opt, ce, Recipe(checkpoint_activations=("0",) if on else (), accumulate=2))
        step(batch)  # not a boundary: gradients stay
        grads[on] = [p.grad.clone() for p in model.parameters()]
        assert model[0].calls == (2 if on else 1)  # forward recomputed in backward
        assert list(model.state_dict()) == ["0.lin.weight", "0.lin.bias", "1.weight", "1.bias"]
        model.eval()
        with torch.no_grad():
            model(batch[0])
        assert model[0].calls == (3 if on else 2)  # no recompute outside training
        step.close()
        model.train()
        model(batch[0]).sum().backward()
        assert model[0].calls == (4 if on else 3)  # close() removed the wrapper
    assert all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))
    with pytest.raises(ValueError, match="'blocks.*' matches no submodule"):
        make_step(build(), torch.optim.SGD(build().parameters(), lr=0.1), ce, Recipe(checkpoint_activations=("blocks.*",)))


def test_switching_the_optimizer_implementation_keeps_its_state():
    ds = data(64)
    a, opt_a, b, opt_b = twins(opt="adam")
    assert optimizer_impl_of(opt_a) == "for-loop"
    step_a, step_b = make_step(a, opt_a, ce, Recipe()), make_step(b, opt_b, ce, Recipe())
    batches = list(loader(ds, 16))
    for batch in batches[:2]:
        step_a(batch)
        step_b(batch)
    fused = switch_optimizer_impl(opt_a, "fused")
    assert fused is not opt_a and type(fused) is torch.optim.Adam
    assert optimizer_impl_of(fused) == "fused" and all(g["fused"] for g in fused.param_groups)
    for p in a.parameters():
        assert torch.equal(fused.state[p]["exp_avg"], opt_a.state[p]["exp_avg"])
        assert float(fused.state[p]["step"]) == 2.0
    step_fused = make_step(a, fused, ce, Recipe())
    for batch in batches[2:]:
        step_fused(batch)
        step_b(batch)
    assert max_diff(a, b) < 1e-6  # fused and for-loop Adam differ in the last bits at most
    via_recipe = make_step(b, opt_b, ce, Recipe(optimizer_impl="foreach"))
    assert optimizer_impl_of(via_recipe.optimizer) == "foreach" and via_recipe.optimizer is not opt_b
    with pytest.raises(ValueError, match="RMSprop has no 'fused' argument"):
        switch_optimizer_impl(torch.optim.RMSprop(a.parameters()), "fused")


def test_fit_refuses_a_scheduler_built_on_an_optimizer_it_rebuilds():
    model, opt, _, _ = twins(opt="adam")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    with pytest.raises(ValueError, match="scheduler=lambda opt"):
        fit(model, opt, ce, loader(data(16), 8), recipe=Recipe(optimizer_impl="fused"), scheduler=sched, progress=False)
    result = fit(model, opt, ce, loader(data(16), 8), recipe=Recipe(optimizer_impl="fused"), progress=False,
                 scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5))
    assert result.steps == 2 and result.history[-1]["lr"] == pytest.approx(opt.param_groups[0]["lr"] * 0.25)


def test_backend_flags_are_restored_on_close():
    model, opt, _, _ = twins()
    assert torch.get_float32_matmul_precision() == "highest"
    with make_step(model, opt, ce, Recipe(precision="tf32")):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == "highest"
    assert not torch.are_deterministic_algorithms_enabled()
    with make_step(model, opt, ce, Recipe(deterministic=True)):
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    with make_step(model, opt, ce, Recipe(threads=1)):  # PIT108's knob: fewer intra-op threads while it runs
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == threads


def test_a_loss_fn_that_returns_a_non_scalar_gets_a_clear_error():
    model, opt, _, _ = twins()
    batch = next(iter(loader(data(8), 8)))
    step = make_step(model, opt, lambda m, b: F.cross_entropy(m(b[0]), b[1], reduction="none"), Recipe(accumulate=2))
    with pytest.raises(LossError, match=r"shape \(8,\) at micro-batch 1 of optimizer step 1 \(reduce it"):
        step(batch)
    with pytest.raises(LossError, match="returned float"):
        make_step(model, opt, lambda m, b: 1.0, Recipe())(batch)
    with pytest.raises(LossError, match="does not require grad"):
        make_step(model, opt, lambda m, b: ce(m, b).detach(), Recipe())(batch)


def test_no_host_sync_per_step(monkeypatch):
    model, _, _, _ = twins()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = make_step(model, opt, ce, Recipe(accumulate=2, clip_norm=1.0, precision="bf16-mixed"))
    batches = list(loader(data(64), 8))

    def forbidden(*a, **k):
        raise AssertionError("host read of a tensor inside the step")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "numpy", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    losses = [step(b) for b in batches]
    monkeypatch.undo()
    assert step.steps == 4 and len(losses) == 8


def test_fit_reads_losses_once_per_log_interval(monkeypatch):
    model, opt, _, _ = twins()
    calls = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(self.shape) or real(self))
    result = fit(model, opt, ce, loader(data(160), 8), recipe=Recipe(), max_steps=20, log_every=5, progress=False)
    assert result.steps == 20
    assert calls == [(5,)] * 4  # one transfer of 5 losses per interval, none per step
    assert [r["step"] for r in result.history] == [5, 10, 15, 20]


def test_cudnn_benchmark_is_set_while_the_step_exists():
    model, opt, _, _ = twins()
    before = torch.backends.cudnn.benchmark
    with make_step(model, opt, ce, Recipe(cudnn_benchmark=True)):
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark == before


def test_recipe_seed_makes_fit_reproducible():
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(99 + len(results))  # the shuffle and dropout depend on Recipe.seed only
        fit(model, opt, ce, loader(data(64), 8, shuffle=True), recipe=Recipe(seed=7), epochs=1, progress=False)
        results.append(model)
    assert max_diff(*results) == 0


def test_a_cuda_recipe_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    model, opt, _, _ = twins()
    with pytest.raises(RuntimeError, match="Recipe.device='cuda' but CUDA is not available"):
        make_step(model, opt, ce, Recipe(device="cuda"))
