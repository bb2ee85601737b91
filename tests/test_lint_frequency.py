"""How often a finding's code runs (issue 31): per step, per epoch / evaluation, or once; the default
output leads with per-step findings and leaves one-time sites out (``--all`` shows them); syncs found
through helpers name their chain of calls."""

from __future__ import annotations

import json
import textwrap

import pytest

from pitstop.cli import main
from pitstop.lint.runner import lint_source, rules_for


def _freq(src: str, *codes: str) -> dict[int, str]:
    """line -> frequency of the findings of ``codes`` in ``src``."""
    found = lint_source(textwrap.dedent(src), "train.py", rules_for(list(codes)))
    return {f.line: f.frequency for f in found}


def test_training_loop_interval_guard_evaluation_loop_and_setup():
    src = """
        import torch
        a = torch.zeros(3).cuda()
        def evaluate(model, val_loader):
            for x in val_loader:
                b = torch.zeros(3).cuda()
        def main(model, loader, val_loader, opt):
            for epoch in range(10):
                for step, x in enumerate(loader):
                    c = torch.zeros(3).cuda()
                    model(x).sum().backward()
                    opt.step()
                    if step % 100 == 0:
                        d = torch.zeros(3).cuda()
                evaluate(model, val_loader)
        main(None, None, None, None)
    """
    assert _freq(src, "PIT106") == {3: "once", 6: "epoch", 10: "step", 14: "epoch"}


def test_helpers_called_from_a_step_any_depth_and_step_bodies_run_per_step():
    src = """
        import torch
        def inner():
            return torch.zeros(3).cuda()
        def outer():
            return inner()
        def train_step(model, x, opt):
            outer()
            model(x).sum().backward()
            opt.step()
        def unused():
            return torch.ones(3).cuda()
    """
    assert _freq(src, "PIT106") == {4: "step", 12: "once"}  # no caller and never referenced: an entry point, once


def test_framework_hooks_and_model_forward_run_per_step():
    src = """
        import torch
        import lightning as L
        class Lit(L.LightningModule):
            def training_step(self, batch, idx):
                return torch.zeros(3).cuda()
            def on_validation_epoch_end(self):
                return torch.zeros(3).cuda()
            def configure_optimizers(self):
                return torch.zeros(3).cuda()
        class Net(torch.nn.Module):
            def forward(self, x):
                return x + torch.zeros(3).cuda()
    """
    assert _freq(src, "PIT106") == {6: "step", 8: "epoch", 10: "once", 13: "step"}


def test_rules_about_every_step_take_step_whatever_their_line():
    src = """
        import torch
        from torch.utils.data import DataLoader
        train_loader = DataLoader(images, batch_size=64, shuffle=True)
        model = torch.nn.Linear(100, 10).cuda()
        for x in train_loader:
            model(x.cuda()).sum().backward()
    """
    assert _freq(src, "PIT101", "PIT102") == {4: "step"}


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "timing.py").write_text(textwrap.dedent("""
        import torch

        class Timer:
            def stop(self):
                self._wait()

            def _wait(self):
                torch.cuda.synchronize()
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch
        from timing import Timer

        state = torch.load("ckpt.pt")

        def train_step(model, batch, opt, timer):
            model(batch.cuda()).sum().backward()
            opt.step()
            timer.stop()
    """))
    return tmp_path


def test_a_sync_two_calls_deep_in_another_file_is_reported_with_its_chain(project, capsys):
    code = main(["lint", "--isolated", "--preview", "train.py", "timing.py"])
    out = capsys.readouterr().out
    assert code == 1
    assert "train.py:10:5: PIT203 train_step -> Timer.stop -> Timer._wait -> synchronize:" in out
    assert "(line 9 of its file)" in out


def test_one_time_findings_are_hidden_by_default_and_counted(project, capsys):
    main(["lint", "--isolated", "--preview", "train.py", "timing.py"])
    out = capsys.readouterr().out
    assert "PIT404" not in out.split("Found")[0]
    assert ("1 finding in code that runs once or whose frequency is unknown (setup, converters, exports) not shown: "
            "`--all` shows them.") in out
    main(["lint", "--isolated", "--preview", "--all", "train.py", "timing.py"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("train.py:10:5: PIT203")  # per-step findings lead
    assert lines[1].startswith("train.py:5:9: PIT404 [once] ")
    # one view (issue 42): JSON and SARIF print what the text prints, the hidden one-time finding only with --all
    main(["lint", "--isolated", "--preview", "--format", "json", "train.py", "timing.py"])
    assert [d["code"] for d in json.loads(capsys.readouterr().out)] == ["PIT203"]
    main(["lint", "--isolated", "--preview", "--all", "--format", "json", "train.py", "timing.py"])
    data = {d["code"]: d for d in json.loads(capsys.readouterr().out)}
    assert (data["PIT203"]["frequency"], data["PIT203"]["severity"]) == ("step", "high")
    assert (data["PIT404"]["frequency"], data["PIT404"]["severity"]) == ("once", "low")
    main(["lint", "--isolated", "--preview", "--all", "--format", "sarif", "train.py", "timing.py"])
    results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    assert {r["ruleId"]: r["level"] for r in results} == {"PIT203": "error", "PIT404": "note"}


def test_only_one_time_findings_exit_zero_unless_all(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "convert.py").write_text('import torch\nstate = torch.load("old.pt")\ntorch.save(state, "new.pt")\n')
    assert main(["lint", "--isolated", "--preview", "convert.py"]) == 0
    assert "not shown: `--all` shows them." in capsys.readouterr().out
    assert main(["lint", "--isolated", "--preview", "--all", "convert.py"]) == 1


def test_a_host_read_in_a_trainer_callback_per_step_hook_is_reported():
    src = """
        import torch
        from transformers import TrainerCallback
        class LossPrinter(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kw):
                print(model.last_loss.item())
            def on_train_end(self, args, state, control, model=None, **kw):
                print(model.last_loss.item())
        device = torch.device("cuda")
    """
    assert _freq(src, "PIT201") == {6: "step"}


_CONVERGENCE = """
import torch

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.Adam(model.parameters())
for step in range(1000):
    loss = model(torch.randn(4, 8, device="cuda")).sum()
    loss.backward()
    opt.step()
    print(loss.item())
"""


def test_a_script_in_a_folder_of_unit_tests_is_test_code(tmp_path, monkeypatch, capsys):
    """Issue 33 (nanotron's tests/kernels/run_layer_norm_convergence.py beside test_layer_norm.py): a module in a
    ``tests``/``test`` folder holding unit-test modules is test support code; the same script elsewhere,
    or in a ``tests`` folder without unit tests, is still linted as training code."""
    monkeypatch.chdir(tmp_path)
    for folder in ("tests/kernels", "scripts", "tests/manual"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "run_convergence.py").write_text(_CONVERGENCE)
    (tmp_path / "tests/kernels/test_layer_norm.py").write_text("def test_nothing():\n    assert True\n")
    main(["lint", "--isolated", "--select", "PIT201", "."])
    out = capsys.readouterr().out
    assert "scripts/run_convergence.py:10:11: PIT201" in out
    assert "tests/manual/run_convergence.py:10:11: PIT201" in out
    assert "tests/kernels/run_convergence.py" not in out


def test_an_opt_in_sync_followed_only_where_some_file_turns_it_on(tmp_path, monkeypatch, capsys):
    """Issue 33 (nanotron's TimerRecord): ``if self.cuda_sync: torch.cuda.synchronize()`` with ``cuda_sync: bool =
    False`` is reported at a per-step call only once some linted file passes ``cuda_sync=True``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "timers.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        import torch

        @dataclass
        class Timer:
            cuda_sync: bool = False

            def stop(self):
                if self.cuda_sync:
                    torch.cuda.synchronize()
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        from timers import Timer

        def train_step(model, batch, opt, timer):
            model(batch.cuda()).sum().backward()
            opt.step()
            timer.stop()
    """))
    main(["lint", "--isolated", "--preview", "train.py", "timers.py"])
    assert "PIT203" not in capsys.readouterr().out
    (tmp_path / "setup_timers.py").write_text("from timers import Timer\nTIMER = Timer(cuda_sync=True)\n")
    main(["lint", "--isolated", "--preview", "train.py", "timers.py", "setup_timers.py"])
    assert "train.py:7:5: PIT203 train_step -> Timer.stop -> synchronize:" in capsys.readouterr().out
