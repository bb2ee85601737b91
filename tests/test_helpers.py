"""Face H: each helper does what its docstring says, on tiny models."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import pitstop
from pitstop.examples.models import make_cnn, make_gpt, make_mlp
from pitstop.helpers.fuse import FusionMismatchError


def test_count_params_trainable_and_frozen():
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    assert pitstop.count_params(m) == 4 * 3 + 3 + 3 * 2 + 2
    pitstop.freeze(m[0])
    assert pitstop.count_params(m, trainable=True) == 3 * 2 + 2
    assert pitstop.count_params(m, trainable=False) == 4 * 3 + 3


def test_count_params_counts_tied_weights_once():
    gpt = make_gpt(n_layer=1, n_embd=32, n_head=2, vocab_size=64, block_size=8)
    manual = sum(p.numel() for p in {id(p): p for p in gpt.parameters()}.values())
    assert pitstop.count_params(gpt) == manual


def test_freeze_unfreeze_roundtrip():
    m = make_cnn()
    pitstop.freeze(m.features)
    assert not any(p.requires_grad for p in m.features.parameters())
    assert all(p.requires_grad for p in m.fc.parameters())
    pitstop.unfreeze(m.features)
    assert all(p.requires_grad for p in m.parameters())


@pytest.mark.parametrize("factory", [make_cnn, make_gpt, make_mlp])
def test_param_groups_no_decay_holds_exactly_biases_and_norm_weights(factory):
    model = factory()
    groups = pitstop.param_groups(model, weight_decay=0.1)
    decay = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    no_decay = {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    expected_no_decay = set()
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            if name == "bias" or isinstance(mod, (nn.BatchNorm2d, nn.LayerNorm)):
                expected_no_decay.add(id(p))
    assert no_decay == expected_no_decay
    assert decay.isdisjoint(no_decay)
    assert decay | no_decay == {id(p) for p in model.parameters()}
    # every decayed tensor is a projection weight (>= 2-D)
    assert all(p.ndim >= 2 for g in groups if g["weight_decay"] > 0 for p in g["params"])
    torch.optim.AdamW(groups, lr=1e-3)  # accepted by a real optimizer


def test_param_groups_skips_frozen_and_rejects_negative_decay():
    model = make_mlp()
    pitstop.freeze(model.net[0])
    ids = {id(p) for g in pitstop.param_groups(model, 0.01) for p in g["params"]}
    assert not ids & {id(p) for p in model.net[0].parameters()}
    with pytest.raises(ValueError, match="-1"):
        pitstop.param_groups(model, -1)


def test_replace_and_drop_head():
    m = make_cnn(num_classes=10)
    new = pitstop.replace_head(m, 3)
    assert m.fc is new and m(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    pitstop.drop_head(m)
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 128)  # features, through the model's own forward
    with pytest.raises(KeyError, match="nope"):
        pitstop.replace_head(make_cnn(), 3, name="nope")
    with pytest.raises(ValueError, match="no nn.Linear"):
        pitstop.drop_head(nn.Sequential(nn.Conv2d(3, 4, 3)))


@pytest.mark.parametrize("kind", ["kaiming", "xavier", "normal", "orthogonal"])
def test_init_weights_kinds(kind):
    torch.manual_seed(0)
    m = pitstop.init_weights(make_cnn(), kind=kind, gain=0.02)
    assert all(float(c.bias.detach().abs().max()) == 0 for c in m.modules() if isinstance(c, nn.Conv2d) and c.bias is not None)
    w = m.fc.weight
    if kind == "normal":
        assert abs(float(w.detach().std()) - 0.02) < 0.01
    if kind == "orthogonal":  # rows of a (10, 128) orthogonal matrix scaled by gain are orthogonal
        gram = (w @ w.T).detach()
        assert torch.allclose(gram, 0.02**2 * torch.eye(10), atol=1e-6)
    with pytest.raises(ValueError, match="bogus"):
        pitstop.init_weights(m, kind="bogus")


def test_tta_averages_views_and_restores_mode():
    m = nn.Linear(4, 2)
    m.train()
    views = torch.randn(3, 5, 4)  # batch 3, 5 views
    out = pitstop.tta(m, views)
    expected = torch.stack([m(views[:, i]) for i in range(5)], 1).mean(1)
    assert torch.allclose(out, expected, atol=1e-6) and m.training
    assert torch.allclose(pitstop.tta(m, [views[:, i] for i in range(5)]), expected, atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        pitstop.tta(m, torch.randn(4))


def test_split_is_disjoint_complete_and_seeded():
    ds = torch.utils.data.TensorDataset(torch.arange(100))
    a = pitstop.split(ds, (0.8, 0.1, 0.1), seed=3)
    b = pitstop.split(ds, (0.8, 0.1, 0.1), seed=3)
    assert [len(s) for s in a] == [80, 10, 10]
    idx = [set(s.indices) for s in a]
    assert set().union(*idx) == set(range(100)) and sum(map(len, idx)) == 100
    assert [s.indices for s in a] == [s.indices for s in b]
    assert [s.indices for s in pitstop.split(ds, (0.8, 0.1, 0.1), seed=4)] != [s.indices for s in a]
    with pytest.raises(ValueError, match="sum to 1"):
        pitstop.split(ds, (0.5, 0.4))


def test_capture_records_named_activations_and_removes_hooks():
    m = make_mlp()
    x = torch.randn(5, 64)
    with pitstop.capture(m, ["net.0", "net.1"]) as acts:
        m(x)
    assert torch.allclose(acts["net.1"], torch.relu(m.net[0](x)))
    assert not m.net[0]._forward_hooks
    with pytest.raises(KeyError, match="bogus"):
        with pitstop.capture(m, ["bogus"]):
            pass


def test_retain_grads_gives_intermediate_gradients():
    lin1, lin2 = nn.Linear(3, 4), nn.Linear(4, 1)
    m = nn.Sequential(lin1, lin2)
    x = torch.randn(2, 3)
    with pitstop.retain_grads(m, ["0"]) as grads:
        m(x).sum().backward()
    # d(sum(W2 h + b2))/dh = W2 for every row
    assert torch.allclose(grads["0"], lin2.weight.detach().expand(2, 4))


def test_seed_everything_repeats_every_rng():
    def draw():
        return random.random(), float(np.random.rand()), float(torch.rand(1))
    pitstop.seed_everything(7)
    first = draw()
    pitstop.seed_everything(7)
    assert draw() == first
    with pytest.raises(ValueError, match="-1"):
        pitstop.seed_everything(-1)


def test_seed_everything_deterministic_mode():
    try:
        pitstop.seed_everything(1, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark is False
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False


def _trained_bn_cnn():
    torch.manual_seed(0)
    m = make_cnn(naive=True)
    m.train()
    with torch.no_grad():
        for _ in range(3):  # non-trivial running statistics
            m(torch.randn(16, 3, 32, 32) * 2 + 0.5)
    return m


def test_fuse_for_inference_folds_conv_bn_and_matches():
    m = _trained_bn_cnn()
    x = torch.randn(4, 3, 32, 32)
    fused = pitstop.fuse_for_inference(m, x)
    assert len(fused.fused_pairs) == 3
    assert not any(isinstance(mod, nn.BatchNorm2d) for mod in fused.modules())
    assert type(fused) is type(m) and m.training  # original untouched, class kept
    m.eval()
    with torch.inference_mode():
        assert torch.allclose(fused(x), m(x), rtol=1e-4, atol=1e-5)


def test_fuse_for_inference_folds_adjacent_linears_only():
    m = make_mlp(naive=True)
    fused = pitstop.fuse_for_inference(m)
    assert fused.fused_pairs == [("net.2", "net.3")]
    n_linear = sum(isinstance(mod, nn.Linear) for mod in fused.modules())
    assert n_linear == sum(isinstance(mod, nn.Linear) for mod in m.modules()) - 1
    assert pitstop.fuse_for_inference(make_mlp(naive=False)).fused_pairs == []


def test_fuse_for_inference_custom_forward_found_by_fx():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn = nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    net = Net()
    net.bn.running_mean.uniform_(-1, 1)
    net.bn.running_var.uniform_(0.5, 2)
    fused = pitstop.fuse_for_inference(net)
    assert fused.fused_pairs == [("conv", "bn")] and isinstance(fused.bn, nn.Identity)


def test_fuse_for_inference_reports_a_mismatch():
    m = make_mlp(naive=True)
    with pytest.raises(FusionMismatchError, match="max abs error"):
        pitstop.fuse_for_inference(m, rtol=0, atol=0, example_input=torch.randn(64, 64) * 1e3)


def test_fuse_for_inference_keeps_bottleneck_linears_unfolded():
    """in->h->out with small h costs in*h + h*out multiply-adds; folded it would cost in*out."""
    bottleneck = nn.Sequential(nn.Linear(256, 16), nn.Linear(16, 256))
    assert pitstop.fuse_for_inference(bottleneck).fused_pairs == []
    wide = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    assert pitstop.fuse_for_inference(wide).fused_pairs == [("0", "1")]


def _precision_state():
    """The fp32 math settings a forward sees (the new per-backend API where torch has it)."""
    b = torch.backends
    if hasattr(b.cudnn, "conv") and hasattr(b.cudnn.conv, "fp32_precision"):
        return (b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision, b.mkldnn.matmul.fp32_precision)
    return (torch.get_float32_matmul_precision(), b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)


@pytest.mark.parametrize("api", ["legacy", "new"])
def test_fuse_for_inference_checks_in_full_fp32_and_restores_the_users_tf32(api):
    """Issue 29: on an H100, cuDNN's default TF32 convolutions made a correct Conv+BN fold
    differ by 4e-4 and raise FusionMismatchError. The check must run in IEEE fp32 (TF32 and
    autocast off) and put the user's settings back, set through either torch API."""
    from pitstop.helpers.precision import full_fp32

    b = torch.backends
    new_api = hasattr(b.cudnn, "conv") and hasattr(b.cudnn.conv, "fp32_precision")
    if api == "new" and not new_api:
        pytest.skip(f"torch {torch.__version__} has no per-backend fp32_precision settings")
    before = _precision_state()
    saved = [(o, a, getattr(o, a)) for o, a in ((b.cuda.matmul, "fp32_precision"), (b.cudnn.conv, "fp32_precision"),
                                                 (b.mkldnn.matmul, "fp32_precision"))] if new_api else []
    try:
        if api == "legacy":
            torch.set_float32_matmul_precision("high")
            b.cudnn.allow_tf32 = True
        else:
            b.cuda.matmul.fp32_precision = "tf32"
            b.cudnn.conv.fp32_precision = "tf32"
            b.mkldnn.matmul.fp32_precision = "bf16"
        user = _precision_state()
        seen = []
        m = _trained_bn_cnn().eval()
        m.register_forward_hook(lambda mod, args, out: seen.append((_precision_state(), torch.is_autocast_enabled("cpu"))))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pitstop.fuse_for_inference(m, torch.randn(2, 3, 32, 32))
            assert torch.is_autocast_enabled("cpu")  # the caller's autocast is back
        ieee = (("ieee",) * 3) if new_api else ("highest", False, False)
        assert seen and all(s == (ieee, False) for s in seen), seen
        assert _precision_state() == user != ieee
        with pytest.raises(ZeroDivisionError), full_fp32():
            1 / 0
        assert _precision_state() == user  # restored when the block raises too
    finally:
        if api == "legacy":
            torch.set_float32_matmul_precision("highest")
            b.cudnn.allow_tf32 = True
        for obj, attr, value in saved:
            setattr(obj, attr, value)
    assert _precision_state() == before
