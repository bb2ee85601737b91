"""Kill-and-resume: a run killed with SIGKILL at several points (after a step, in the middle
of a checkpoint write, right after a checkpoint at an epoch's end), resumed each time, ends
with the same parameters, optimizer state and RNG state, bit for bit, as a run never
interrupted (CPU, seeded shuffling loader, dropout, in-process data noise, fp16 + GradScaler,
accumulation with an epoch tail, Adam, StepLR)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import FIXTURES
from pitstop.engine.checkpoint import latest_checkpoint, list_checkpoints

SCRIPT = FIXTURES / "engine" / "resume_train.py"


def run(ckpt, out, *extra):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(ckpt), str(out), *extra], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return proc


def tensors_equal(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), f"differs at {where}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            tensors_equal(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            tensors_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run both tests compare against (the script is deterministic: one run
    serves both)."""
    tmp = tmp_path_factory.mktemp("ref")
    ref = run(tmp / "ref", tmp / "ref.pt")
    assert ref.returncode == 0, ref.stderr
    return tmp / "ref.pt"


@pytest.mark.slow
def test_sigkilled_runs_resume_to_the_bitwise_same_result(tmp_path, reference):
    ckpt = tmp_path / "ckpt"

    killed = run(ckpt, tmp_path / "x.pt", "--kill-after-step", "3")  # before step 3's checkpoint
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert latest_checkpoint(ckpt).name == "step-000000002.pt"

    killed = run(ckpt, tmp_path / "x.pt", "--kill-in-write", "9")  # epoch 1, half of step 9's file written
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    leftovers = [p.name for p in ckpt.iterdir() if p.name.startswith(".step-000000009.pt.pitstop-tmp.")]
    assert len(leftovers) == 1 and (ckpt / leftovers[0]).stat().st_size > 0
    assert latest_checkpoint(ckpt).name == "step-000000008.pt"  # the torn write is never "latest"
    assert (ckpt / "pitstop.lock").exists()  # the killed run's lock: stale, taken over by the next run

    killed = run(ckpt, tmp_path / "x.pt", "--kill-after-checkpoint", "14")  # the last step of epoch 1
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert list_checkpoints(ckpt)[0].name == "step-000000014.pt"

    done = run(ckpt, tmp_path / "resumed.pt")
    assert done.returncode == 0, done.stderr
    assert not any(p.name.startswith(".step-") for p in ckpt.iterdir())  # the dead writers' temp files removed
    assert not (ckpt / "pitstop.lock").exists()
    a = torch.load(reference, weights_only=True)
    b = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert b["resumed_from"].endswith("step-000000014.pt") and a["resumed_from"] == "None"
    assert a["steps"] == b["steps"] == 21
    tensors_equal(a["model"], b["model"], "model")
    tensors_equal(a["optimizer"], b["optimizer"], "optimizer")
    tensors_equal(a["rng"], b["rng"], "torch rng")


@pytest.mark.slow
def test_resume_without_the_epoch_replay_would_differ(tmp_path, reference):
    """The bitwise check above can fail: resuming from a mid-epoch checkpoint with fresh
    epoch-start RNG states (what a loop that only saves model+optimizer does) changes the result."""
    killed = run(tmp_path / "ckpt", tmp_path / "x.pt", "--kill-after-step", "5")
    assert killed.returncode == -signal.SIGKILL
    path = latest_checkpoint(tmp_path / "ckpt")
    state = torch.load(path, weights_only=True)
    state["epoch_rng"] = [dict(e, **{"global": state["rng"][0]}) for e in state["epoch_rng"]]  # forget the epoch start
    torch.save(state, path)
    done = run(tmp_path / "ckpt", tmp_path / "resumed.pt")
    assert done.returncode == 0, done.stderr
    a = torch.load(reference, weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed.pt", weights_only=True)["model"]
    assert any(not torch.equal(a[k], b[k]) for k in a)
