"""Frameworks (issue 12), fast in-process parts: closures, wrappers, detection, fixes in the
framework's terms, recipe export round-trips on the real installs, the integrations' import
discipline. The subprocess runs (doctor/tune on the fixture scripts) are in
``test_frameworks_scripts.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest
import torch
from torch import nn

from conftest import ROOT
from pitstop.doctor.analysis.check import Finding, Thresholds, in_framework_terms
from pitstop.doctor.record.frameworks import FrameworkInfo, detect, unwrap
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.probe_records import ProbeResult
from pitstop.doctor.analysis.records import FrameworkRecord, StepTime
from pitstop.jsoncodec import from_json
from pitstop.engine.export import export, read_back
from pitstop.engine.recipe import Recipe


def _closure_step(optimizer: str):
    """One step of a loop whose forward and backward run inside ``optimizer.step(closure)``:
    LBFGS (positional closure, called several times) or SGD with ``closure=`` (Lightning's way)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    def step():
        if optimizer == "lbfgs":
            opt.step(closure)
        else:
            opt.step(closure=closure)
    return step


@pytest.mark.parametrize("optimizer, forwards_per_step", [("lbfgs", 3), ("sgd-keyword", 1)])
def test_forward_and_backward_inside_a_closure_are_not_optimizer_time(optimizer, forwards_per_step):
    import pitstop

    report = pitstop.doctor(_closure_step(optimizer), steps=4, warmup=1, probes=False)
    b = report.breakdown()
    assert b["forward"]["seconds"] > 0 and b["backward"]["seconds"] > 0
    # forward+backward ran inside optimizer.step(): counted once, as themselves (not 185% of a step)
    measured = sum(v["share"] for k, v in b.items() if k != "other")
    assert measured <= 1.02, b
    assert report.observations.forwards.train >= forwards_per_step * 4
    assert all(r.loss is not None for r in report.result.observed)
    assert report.observations.framework_name is None


def test_unwrap_reaches_the_user_module_without_touching_wrapper_getattr():
    model = nn.Linear(4, 2)
    assert unwrap(model) is model
    assert unwrap(torch.compile(model)) is model  # OptimizedModule, not compiled until called
    assert unwrap(nn.DataParallel(model)) is model
    L = pytest.importorskip("lightning")
    fabric = L.Fabric(accelerator="cpu", devices=1)
    wrapped = fabric.setup_module(model)
    assert type(wrapped).__name__ == "_FabricModule"
    assert unwrap(wrapped) is model


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.module = nn.Linear(8, 2)  # a child called `module`: not a wrapper

    def forward(self, x):
        return self.module(x)


def test_doctor_names_the_users_module_under_fabric_and_what_wraps_it():
    import pitstop
    from pitstop.doctor.record import wrappers
    from pitstop.doctor.record.frameworks import wrapper_chain

    L = pytest.importorskip("lightning")
    fabric = L.Fabric(accelerator="cpu", devices=1)
    model = _Tiny()
    wrapped = fabric.setup_module(model)
    assert wrapper_chain(wrapped) == ["_FabricModule", "_Tiny"] and unwrap(wrapped) is model
    assert unwrap(model) is model and wrapper_chain(model) == ["_Tiny"]  # self.module is the user's layer
    assert wrappers.unwrap is unwrap and wrappers.wrapper_chain is wrapper_chain  # one implementation
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    x = torch.randn(16, 8)

    def step():
        opt.zero_grad()
        fabric.backward(wrapped(x).square().mean())
        opt.step()

    report = pitstop.doctor(step, steps=3, warmup=1, probes=False)
    models = report.observations.models
    assert [(m.cls, m.wrapped_by) for m in models] == [("_Tiny", ["_FabricModule"])]
    assert models[0].params == 8 * 2 + 2


def test_detect_without_a_framework_on_the_stack_is_plain_pytorch():
    info = detect()
    assert info.name is None and info.label == "PyTorch" and info.driver is None


def _obs(framework: str | None, **kw) -> Observations:
    fw = from_json(FrameworkRecord, FrameworkInfo(name=framework, driver="x.Y").to_dict()) if framework else None
    return Observations(framework=fw, step_time=StepTime(mean=0.1, median=0.1), **kw)


@pytest.mark.parametrize("framework, expected", [
    ("lightning", 'Lightning Trainer: Trainer(precision="bf16-mixed")'),
    ("fabric", 'Lightning Fabric: Fabric(precision="bf16-mixed")'),
    ("transformers", "HF Trainer: TrainingArguments(bf16=True)"),
    ("accelerate", 'Accelerate: Accelerator(mixed_precision="bf16")'),
])
def test_precision_fix_is_phrased_in_the_framework_option(framework, expected):
    from pitstop import catalog

    catalog.load_all()
    from pitstop.tips.pit301_mixed_precision import MixedPrecisionCheck

    raw = Finding(code="PIT301", title="t", evidence="e", fix="with torch.autocast(...) (`pitstop explain PIT301`)",
                  severity="high")
    obs = _obs(framework, probes={"precision": ProbeResult(dtype="bfloat16")})
    got = in_framework_terms(MixedPrecisionCheck(), raw, obs)
    assert got.fix.startswith(expected)
    assert "in plain PyTorch: with torch.autocast" in got.fix  # the raw fix stays, second
    assert in_framework_terms(MixedPrecisionCheck(), raw, _obs(None)) == raw


def test_a_framework_without_its_own_lever_keeps_the_plain_fix():
    from pitstop import catalog

    catalog.load_all()
    from pitstop.tips.pit101_dataloader_workers import DataWaitCheck

    raw = Finding(code="PIT101", title="t", evidence="e", fix="DataLoader(..., num_workers=N)", severity="high")
    assert in_framework_terms(DataWaitCheck(), raw, _obs("fabric")) == raw  # Fabric users build their loader
    hf = in_framework_terms(DataWaitCheck(), raw, _obs("transformers"))
    assert "TrainingArguments(dataloader_num_workers=N" in hf.fix
    assert Thresholds()  # (imported for the finding helpers' signature)


TUNED = Recipe(precision="bf16-mixed", accumulate=2, clip_norm=1.0, optimizer_impl="fused", num_workers=2,
               persistent_workers=True, seed=3)


def test_recipe_round_trips_through_a_real_lightning_trainer_and_fabric():
    L = pytest.importorskip("lightning")
    cfg = export(TUNED, "lightning")
    trainer = L.Trainer(**cfg.kwargs, accelerator="cpu", logger=False, enable_checkpointing=False)
    assert read_back(trainer) == {"precision": "bf16-mixed", "accumulate": 2, "clip_norm": 1.0}
    assert any("fused=True" in line for line in cfg.code)
    assert any("num_workers=2" in line for line in cfg.code)
    fcfg = export(TUNED, "fabric")
    assert read_back(L.Fabric(**fcfg.kwargs, accelerator="cpu"))["precision"] == "bf16-mixed"
    assert any("clip_gradients" in line for line in fcfg.code)
    assert "Fabric(precision='bf16-mixed'" in fcfg.snippet()


def test_recipe_round_trips_through_real_training_arguments():
    transformers = pytest.importorskip("transformers")
    r = TUNED.replace(compile="default")
    cfg = export(r, "transformers")
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, use_cpu=True, **cfg.kwargs)
    back = read_back(args)
    for field, value in r.changed().items():
        if field in back:
            assert back[field] == value, field
    assert {"precision", "accumulate", "clip_norm", "compile", "optimizer_impl", "num_workers",
            "persistent_workers", "seed"} <= set(back)
    assert cfg.kwargs["optim"] == "adamw_torch_fused" and cfg.kwargs["bf16"] is True


def test_recipe_round_trips_through_a_real_accelerator():
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    cfg = export(TUNED, "accelerate")
    AcceleratorState._reset_state(True)
    try:
        acc = Accelerator(cpu=True, **cfg.kwargs)
        assert read_back(acc) == {"precision": "bf16-mixed", "accumulate": 2, "compile": None}
    finally:
        AcceleratorState._reset_state(True)
    assert any("clip_grad_norm_" in line for line in cfg.code)


def test_export_names_what_a_framework_cannot_express():
    cfg = export(Recipe(clip_value=0.5, checkpoint_activations=("blocks.*",)), "transformers")
    assert any("clip_value" in u for u in cfg.unsupported)
    assert any("checkpoint_activations" in u for u in cfg.unsupported)
    assert export(Recipe(), "lightning").kwargs == {}  # the defaults change nothing
    with pytest.raises(ValueError, match="unknown framework"):
        export(Recipe(), "keras")


def test_knob_patches_the_module_inside_fabric_without_recursion():
    L = pytest.importorskip("lightning")
    from pitstop.tune import patch

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    fabric = L.Fabric(accelerator="cpu", devices=1)
    wrapped = fabric.setup_module(model)
    seen = {}

    def wrapper(forward):
        def f(*a, **k):
            seen["autocast"] = torch.is_autocast_enabled("cpu")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return patch.to_float(forward(*a, **k))
        return f

    patch.on_model(lambda m: (seen.setdefault("target", m), patch.wrap_forward(m, wrapper)))
    try:
        out = wrapped(torch.randn(4, 8))
        out = wrapped(torch.randn(4, 8))  # the second call goes the same way (no recursion)
    finally:
        patch.reset()
    assert seen["target"] is model and out.dtype == torch.float32 and out.shape == (4, 2)


def test_a_failed_patch_is_the_knobs_failure():
    from pitstop.tune import patch
    from pitstop.tune.script import run_from_result

    model = nn.Linear(4, 2)

    def broken(m):
        raise AttributeError("no such thing")

    patch.on_model(broken)
    try:
        with pytest.raises(patch.KnobApplyError, match="could not change Linear"):
            model(torch.randn(2, 4))
    finally:
        patch.reset()

    from pitstop.doctor.run.spec import SetupFailed

    assert issubclass(patch.KnobApplyError, SetupFailed)  # the child reports it as a typed status

    class R:  # the doctor's RunResult, as the child reports a SetupFailed raised while the script ran
        status, steps, peak_memory, elapsed, exit_code, returncode = "setup_error", [], None, 0.0, None, 1
        compile = None
        message = "could not change Linear: AttributeError: x"
        traceback = "Traceback ...\npitstop.tune.patch.KnobApplyError: could not change Linear: AttributeError: x\n"

    run = run_from_result(R(), 3)
    assert run.status == "setup_error" and run.message.startswith("could not change Linear")


def test_compile_trial_draws_dropout_like_eager():
    from pitstop import catalog

    catalog.load_all()
    import torch._inductor.config as inductor_config

    from pitstop.tips.pit601_compile import CompileKnob
    from pitstop.tune import patch

    before = inductor_config.fallback_random
    try:
        CompileKnob().apply_in_child("default")
        assert inductor_config.fallback_random is True
    finally:
        inductor_config.fallback_random = before
        patch.reset()


def test_importing_pitstop_imports_no_framework():
    code = ("import sys, pitstop, pitstop.integrations, pitstop.doctor.record.frameworks, pitstop.engine.export; "
            "bad = [m for m in ('lightning', 'transformers', 'accelerate', 'pytorch_lightning') if m in sys.modules]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_tune_report_prints_the_framework_snippet():
    import io

    from pitstop.paired import Decision, Measure
    from pitstop.report.tune_terminal import render_text
    from pitstop.tune.knob import Context, Setting
    from pitstop.tune.options import TuneOptions
    from pitstop.tune.result import Run, Trial, TuneResult
    from pitstop.tune.search_info import TuneSettings

    run = Run(status="ok", step_times=[0.1, 0.1], losses=[1.0, 0.9])
    best = Trial(name="bf16 autocast", settings=(Setting("PIT301", "autocast", "bf16", "bf16 autocast"),),
                 runs=[run], status="kept", recipe={"precision": "bf16-mixed"},
                 speed=Decision("faster", 1.3, 1.2, 1.4, 0.9, pairs=2, won=2, measure=Measure("wall", "quiet")))
    result = TuneResult(mode="script", target="train.py", device="cpu",
                        settings=TuneSettings(TuneOptions(steps=3, warmup=1, repeats=2)),
                        context=Context(framework="transformers"), baseline=Trial(name="baseline", runs=[run]),
                        trials=[best], best=best, best_recipe=Recipe(precision="bf16-mixed").to_dict(),
                        snippet="with torch.autocast(...):\n")
    buf = io.StringIO()
    render_text(result, file=buf)
    text = buf.getvalue()
    assert "set it in your TrainingArguments" in text and "bf16=True" in text
    assert text.index("bf16=True") < text.index("with torch.autocast")  # the framework's form first


def test_sync_sites_walk_past_framework_frames_to_the_users_line():
    L = pytest.importorskip("lightning")
    import os

    from pitstop.doctor.record.patching import user_site

    fake = os.path.join(os.path.dirname(L.__file__), "pitstop_test_fake.py")  # a path inside the package
    namespace: dict = {}
    code = compile("def framework_code(report):\n    return report()\n", fake, "exec")
    exec(code, namespace)  # the function's frames now look like lightning's own code
    line = sys._getframe().f_lineno + 1
    site = namespace["framework_code"](lambda: user_site(2))  # starts in the framework frame
    assert site == f"{__file__}:{line}"


@pytest.mark.slow
def test_lightning_callback_runs_the_doctor_over_a_window(tmp_path):
    L = pytest.importorskip("lightning")
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "frameworks"))
    try:
        from lightning_cnn import LitCNN
    finally:
        sys.path.pop(0)
    from torch.utils.data import DataLoader, TensorDataset

    from pitstop.integrations.lightning import PitstopDoctor

    cb = PitstopDoctor(steps=3, warmup=1, start_step=2, probes=False, print_report=False, save=tmp_path / "d.json")
    data = TensorDataset(torch.randn(128, 3, 32, 32), torch.randint(0, 10, (128,)))
    trainer = L.Trainer(max_steps=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
    trainer.fit(LitCNN(), DataLoader(data, batch_size=16))
    assert trainer.global_step == 10  # training went on after the window
    report = cb.report
    assert report.outcome == "diagnosed" and len(report.result.observed) == 3
    assert report.observations.framework_name == "lightning"
    assert sum(v["share"] for k, v in report.breakdown().items() if k != "other") <= 1.02
    assert (tmp_path / "d.json").exists()
    with pytest.raises(ValueError, match="json or .html"):
        PitstopDoctor(save="report.txt")


@pytest.mark.slow
def test_transformers_callback_runs_the_doctor_over_a_window():
    transformers = pytest.importorskip("transformers")
    from pitstop.integrations.transformers import PitstopDoctorCallback

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            ids = torch.arange(i, i + 16) % 128
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=128,
                                                                 n_positions=16, bos_token_id=0, eos_token_id=0))
    cb = PitstopDoctorCallback(steps=2, warmup=1, probes=False, print_report=False)
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, max_steps=6, per_device_train_batch_size=8, use_cpu=True,
                                              report_to=[], save_strategy="no", logging_strategy="no",
                                              disable_tqdm=True)
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    report = cb.report
    assert report.outcome == "diagnosed" and len(report.result.observed) == 2
    assert report.observations.framework_name == "transformers"


def test_recipe_cli_prints_a_framework_form(cli, tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[recipe]\nprecision = "bf16-mixed"\nnum_workers = 2\n', encoding="utf-8")
    out = cli("recipe", str(path), "--for", "transformers")
    assert out.returncode == 0, out.stderr
    assert "TrainingArguments(output_dir=..., bf16=True, dataloader_num_workers=2" in out.stdout
    out = cli("recipe", str(path), "--for", "accelerate", "--format", "json")
    assert json.loads(out.stdout)["kwargs"] == {"mixed_precision": "bf16"}
    assert "num_workers=2" in json.loads(out.stdout)["code"][0]


def test_a_compile_failure_is_the_knobs_failure(monkeypatch):
    from torch._dynamo.exc import TorchDynamoException

    from pitstop import catalog

    catalog.load_all()
    import torch._inductor.config as inductor_config

    from pitstop.tips.pit601_compile import CompileKnob
    from pitstop.tune import patch

    class CompileFailed(TorchDynamoException):  # what dynamo/inductor raise derives from it
        pass

    def failing_compile(fn, **kw):
        def run(*a, **k):
            raise CompileFailed("no C++ compiler")
        return run

    monkeypatch.setattr(torch, "compile", failing_compile)
    before = inductor_config.fallback_random
    model = nn.Linear(4, 2)
    try:
        CompileKnob().apply_in_child("default")
        with pytest.raises(patch.KnobApplyError, match="torch.compile failed"):
            model(torch.randn(2, 4))
    finally:
        inductor_config.fallback_random = before
        patch.reset()
