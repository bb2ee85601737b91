"""DDP on CPU (gloo) under torchrun: 2 processes equal 1 process with the same global batch,
no_sync skips the all-reduce on non-final micro-batches, and only rank 0 writes checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from conftest import FIXTURES
from engine_helpers import ce, data, max_diff, mlp
from pitstop.engine import Recipe, fit
from pitstop.engine.checkpoint import list_checkpoints

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_torchrun_two_processes_match_one_process_and_use_no_sync(tmp_path):
    out, ckpt = tmp_path / "ddp.pt", tmp_path / "ckpt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(FIXTURES / "engine" / "ddp_train.py"), str(out), HERE, str(ckpt)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ddp = torch.load(out, weights_only=True)

    # one process, global batch 8 (= 2 ranks x 4), same shuffle: DistributedSampler(num_replicas=1)
    # gives the permutation whose interleaved halves the two ranks took
    ds = data(72)
    single = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0))
    model = mlp(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref = fit(model, opt, ce, single, recipe=Recipe(seed=0, accumulate=2), epochs=2, progress=False)

    assert ddp["steps"] == ref.steps == 10  # 9 micro-batches per rank per epoch: groups 2,2,2,2,1
    assert ddp["samples"] == 72  # per rank: 36 x 2 epochs
    reference = mlp(seed=0)
    reference.load_state_dict(ddp["model"])
    # same math, different summation order (per-rank means averaged by the all-reduce)
    assert max_diff(reference, model) < 1e-5
    # no_sync: the all-reduce runs once per bucket per optimizer step, never on the first
    # micro-batch of a group (without no_sync it would run once per micro-batch: 18 x buckets)
    per_step = ddp["per_step"]
    buckets = per_step[0]
    assert buckets >= 1
    assert per_step == [buckets * (i + 1) for i in range(10)]
    assert ddp["calls"] == 10 * buckets
    # rank 0 alone wrote checkpoints (one file per step, no duplicates or temp files)
    # (plus the run manifest that per-run pruning reads; the lock is released at the end)
    names = sorted(p.name for p in ckpt.iterdir() if p.name != "pitstop-checkpoints.json")
    assert names == sorted(p.name for p in list_checkpoints(ckpt)) and names[-1] == "step-000000010.pt"
    state = torch.load(ckpt / "step-000000010.pt", weights_only=True)
    assert len(state["rng"]) == 2 and state["world_size"] == 2  # every rank's RNG state
