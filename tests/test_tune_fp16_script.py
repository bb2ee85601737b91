"""Script-mode fp16 + GradScaler (PIT301's knob): the scaler the child puts around an unmodified
script's backward, clipping and optimizer step (:func:`pitstop.tune.patch.grad_scaler`), when the
knob chooses fp16 and why it does not, and one real script-mode run that forces fp16 on a CPU."""

from __future__ import annotations

import ast
import math

import pytest

from conftest import FIXTURES
from pitstop.tune.knob import Context, all_knobs, combined_snippet
from pitstop.tune.options import TuneOptions
from pitstop.tune.result import Run
from pitstop.tune.session import TuneSession

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

SCRIPT_OK = dict(mode="script", step_boundary="optimizer.step", backward_calls=5)


def autocast_knob():
    return next(k for k in all_knobs() if k.tip == "PIT301")


@pytest.fixture
def patch():
    from pitstop.tune import patch

    yield patch
    patch.reset()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


def _batch(scale=0.5):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=g)
    return x, x[:, :1] * scale


def _fp16_loss(model, x, y):
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    return F.mse_loss(out.float(), y)


# -- the child-side scaler, in this process (undone after each test) ------------------------------
def test_the_scaler_scales_the_backward_and_unscales_before_clipping(patch):
    x, y = _batch()
    ref = _mlp()  # the true gradient norm of the first step, fp32, no scaler
    F.mse_loss(ref(x), y).backward()
    true_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ref.parameters()])))

    originals = (torch.autograd.backward, torch.optim.Optimizer.__init__, nn.utils.clip_grad_norm_)
    scaler = patch.grad_scaler("cpu")
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.optim.lr_scheduler.StepLR(opt, step_size=5)  # wraps opt.step: must still reach the scaler
    losses = []
    for step in range(4):
        loss = _fp16_loss(model, x, y)
        opt.zero_grad()
        loss.backward()
        raw = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])))
        clipped = float(nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5))
        if step == 0:
            assert scaler.get_scale() > 1
            assert raw == pytest.approx(true_norm * scaler.get_scale(), rel=0.05)  # the backward was scaled
            assert clipped == pytest.approx(true_norm, rel=0.05)  # unscale_ ran before clipping
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]  # it trains
    patch.reset()
    assert (torch.autograd.backward, torch.optim.Optimizer.__init__, nn.utils.clip_grad_norm_) == originals


def test_an_overflowing_step_is_skipped_but_still_ends_a_step(patch):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    steps = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: steps.append(opt))
    try:
        scaler = patch.grad_scaler("cpu")
        model = _mlp()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        x, y = _batch(scale=300.0)  # gradients x 65536 overflow fp16
        scales = []
        for _ in range(3):
            before = model[0].weight.detach().clone()
            opt.zero_grad()
            _fp16_loss(model, x, y).backward()
            opt.step()
            assert torch.equal(before, model[0].weight)  # the scaler skipped the update
            scales.append(scaler.get_scale())
    finally:
        handle.remove()
    assert len(steps) == 3  # the step hooks (the doctor's step boundary) fired every iteration
    assert scales[1] < scales[0] or scales[2] < scales[1]  # update() halved the scale


def test_a_closure_step_cannot_be_scaled(patch):
    patch.grad_scaler("cpu")
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _batch()

    def closure():
        opt.zero_grad()
        loss = _fp16_loss(model, x, y)
        loss.backward()
        return loss

    closure()
    with pytest.raises(patch.KnobApplyError, match="closure"):
        opt.step(closure)


# -- which value the knob chooses, and why not the other ----------------------------------------
def test_bf16_where_it_is_fast_fp16_before_ampere_and_the_other_value_says_why():
    knob = autocast_knob()
    cpu = Context(**SCRIPT_OK)
    assert knob.values(cpu) == ["bf16"] and "matrix units" in knob.not_tried(cpu)["fp16"]
    ampere = Context(device="cuda", capability=(8, 0), **SCRIPT_OK)
    assert knob.values(ampere) == ["bf16"] and "no GradScaler" in knob.not_tried(ampere)["fp16"]
    volta = Context(device="cuda", capability=(7, 0), **SCRIPT_OK)
    assert knob.values(volta) == ["fp16"] and "7.0" in knob.not_tried(volta)["bf16"]
    assert knob.applies(volta) and knob.cannot_run("fp16", volta) is None
    assert knob.child_kwargs("fp16", volta) == {"device": "cuda"}


@pytest.mark.parametrize("change, why", [
    (dict(framework="lightning"), "lightning runs both itself"),
    (dict(scaler_calls=4), "already scales its losses"),
    (dict(step_boundary="backward"), "manual parameter updates"),
    (dict(backward_calls=0), "no backward call"),
])
def test_fp16_is_not_run_where_the_script_shows_nothing_safe_to_patch(change, why):
    ctx = Context(device="cuda", capability=(7, 5), **{**SCRIPT_OK, **change})
    assert why in autocast_knob().cannot_run("fp16", ctx)
    assert autocast_knob().cannot_run("bf16", ctx) is None
    assert autocast_knob().cannot_run("fp16", Context(mode="api", **change)) is None  # the engine's own scaler


class _Survey:
    """A backend whose survey is ``ctx`` and which runs nothing."""

    mode, target = "script", "fake.py"

    def __init__(self, ctx):
        self.ctx, self.runs = ctx, []

    def context(self):
        return self.ctx

    def run(self, settings, knobs, **kw):
        self.runs.append(settings)
        return Run("ok", step_times=[0.1], losses=[1.0])

    def close(self):
        pass


def _survey(ctx, **opts):
    session = TuneSession(_Survey(ctx), all_knobs(), TuneOptions(only=("PIT301",), **opts))
    session.survey()
    return {t.name: t for t in session.trials}, {t.name: t for t in session.not_applicable}, session.notes


def test_the_options_ask_for_fp16_and_the_survey_lists_it_or_says_why_not():
    tried, skipped, notes = _survey(Context(**SCRIPT_OK))
    assert list(tried) == ["bf16 autocast"] and not skipped
    assert [n for n in notes if n.startswith("PIT301 fp16 autocast + GradScaler not tried: on a CPU bf16")]
    assert "--try autocast=fp16" in notes[0]
    tried, skipped, notes = _survey(Context(**SCRIPT_OK), try_values=("autocast=fp16",))
    assert list(tried) == ["bf16 autocast", "fp16 autocast + GradScaler"] and not skipped and not notes
    assert tried["fp16 autocast + GradScaler"].recipe.precision == "fp16-mixed"
    # asked for, but the script's structure gives the scaler nothing safe to patch: not run, with why
    tried, skipped, _ = _survey(Context(**{**SCRIPT_OK, "step_boundary": "backward"}), try_values=("PIT301=fp16",))
    assert list(tried) == ["bf16 autocast"] and "manual parameter updates" in skipped["fp16 autocast + GradScaler"].reason
    # a GPU before Ampere: fp16 by default, bf16 said not tried
    tried, _, notes = _survey(Context(device="cuda", capability=(7, 0), **SCRIPT_OK))
    assert list(tried) == ["fp16 autocast + GradScaler"] and "no bf16 tensor cores" in notes[0]
    with pytest.raises(ValueError, match="KNOB=VALUE"):
        TuneOptions(try_values=("autocastfp16",))
    assert TuneOptions(try_values=("workers=2", "autocast=fp16")).asked(autocast_knob()) == ["fp16"]


def test_the_fp16_snippet_parses_and_holds_the_scaler():
    ctx = Context(device="cuda", capability=(7, 0), **SCRIPT_OK)
    code = combined_snippet([(autocast_knob(), "fp16")], ctx)
    ast.parse(code)
    for line in ('torch.amp.GradScaler("cuda")', "dtype=torch.float16", "scaler.scale(loss).backward()",
                 "scaler.unscale_(optimizer)", "scaler.step(optimizer)", "scaler.update()", "out.float()"):
        assert line in code
    assert code.index("unscale_") < code.index("scaler.step(")


# -- one real script-mode run: fp16 forced on this CPU ------------------------------------------------
@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"), reason="torch.amp.GradScaler needs torch 2.3+")
def test_a_script_run_with_fp16_forced_scales_unscales_before_clipping_and_trains_the_same(tmp_path):
    pytest.importorskip("pitstop.doctor.run.runner", reason="script mode runs on the doctor's child-process runner")
    from pitstop.tune.equivalence import check_losses
    from pitstop.tune.script import ScriptBackend

    knob = autocast_knob()
    log = tmp_path / "norms.txt"
    runs, rows = {}, {}
    backend = ScriptBackend(str(FIXTURES / "tune" / "clip_train.py"), args=[str(log)], threads=1)
    try:
        for name, settings in (("fp32", ()), ("fp16", (knob.setting("fp16"),))):
            runs[name] = backend.run(settings, [knob], steps=6, warmup=2, timeout=120)
            rows[name] = [tuple(map(float, ln.split())) for ln in log.read_text().splitlines()]
            log.unlink()
    finally:
        backend.close()
    for name, run in runs.items():
        assert run.ok and len(run.step_times) == 6, (name, run.status, run.message, run.traceback)
    base, fp16 = runs["fp32"], runs["fp16"]
    assert all(math.isfinite(v) for v in fp16.losses) and len(fp16.losses) == len(base.losses)
    check = check_losses([base.losses], [fp16.losses], reduced_precision=True)
    assert check.passed, check.message
    assert len(rows["fp16"]) >= 7
    assert all(raw == pytest.approx(clipped, rel=1e-4) for raw, clipped in rows["fp32"])  # nothing scales fp32
    assert all(raw / clipped > 100 for raw, clipped in rows["fp16"])  # the backward was scaled (scale != 1)
    # clipping saw the unscaled gradients: the same norms as fp32's (same weights and batches, no overflow here)
    assert [c for _, c in rows["fp16"]] == pytest.approx([c for _, c in rows["fp32"]], rel=0.05)


@pytest.mark.parametrize("bad, said", [("autocastfp16", "expected KNOB=VALUE"), ("nosuchknob=1", "no knob for")])
def test_cli_try_is_checked_before_the_search(tmp_path, capsys, bad, said):
    from pitstop.cli import main

    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    assert main(["tune", str(script), "--try", bad]) == 2
    err = capsys.readouterr().err
    assert "--try" in err and said in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()  # the search never started
