"""``pitstop tune --nproc-per-node 2``: every trial a whole torchrun job (gloo, CPU), the step time
the slowest rank's, the loss checked on every rank, nothing left running after it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

from pitstop.tune.job import run_from_job

pytestmark = pytest.mark.slow

TUNE = FIXTURES / "tune"
sys.path.insert(0, str(TUNE))
import planted_knobs as planted  # noqa: E402


def _alive_with(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find leftover processes")
def test_a_ddp_job_gets_a_path_and_a_recipe_each_trial_a_whole_job_nothing_left_running(tmp_path):
    from pitstop.tune.api import tune_script

    script = tmp_path / f"ddp_tune_{os.getpid()}.py"  # a name no other process has
    shutil.copy(FIXTURES / "ddp" / "train.py", script)
    # rank 1 loads slowly (100 ms per batch of 8, sleeping): the job waits for it every step; every
    # step also waits 30 ms (--step-sleep), so with the workers hiding the loading a step takes a
    # steady ~35 ms, not the few noisy milliseconds whose ratios once left the trial undecided
    # after 2 pairs (3 pairs, and 3 again to confirm: 4 more whole jobs). Up to 5 pairs: on a quiet
    # machine both the choice and the confirmation decide in 2 (measured ~3.5x, interval 1.9-6.3x,
    # beside two CPU hogs on the 2-core AMD EPYC); in a whole-suite run with a cold Inductor cache
    # (g++ beside it), the confirmation once did not hold after 3 pairs and nothing was recommended
    # (its reason was not recorded then; the assertion below now prints it)
    r = tune_script(str(script), args=("--sampler", "--slow-rank", "1", "--step-sleep", "0.03"), steps=4, warmup=2,
                    repeats=2, max_pairs=5, timeout=120, nproc_per_node=2, knobs=[planted.IOWorkersKnob()])
    assert not _alive_with(script.name)
    t = r.trial("num_workers=4")
    assert t.status == "kept", t.reason
    assert all(len(run.rank_losses) == 2 for run in t.ok_runs)  # every rank's losses, checked
    assert "rank" in t.loss_check.message
    assert r.best is not None, [(c.status, c.reason) for c in r.combination]  # confirmed in fresh pairs
    assert [s.trick for s in r.stages] == ["num_workers=4"]
    assert r.to_dict()["best"]["recipe"]["num_workers"] == 4
    assert "torchrun, 2 ranks" in r.target and r.time.worker == "a torchrun job of 2 ranks per run"


class _Step:
    def __init__(self, kind, wall, loss):
        self.kind, self.wall, self.loss = kind, wall, loss
        self.cpu = self.cpu_children = self.run_delay = self.main_active = self.gpu = None
        self.batch_size = 8


class _Result:
    def __init__(self, walls, losses, status="stopped"):
        self.steps = [_Step("warmup", 0.5, losses[0])] + [_Step("observed", w, l) for w, l in zip(walls, losses[1:])]
        self.status, self.peak_memory, self.elapsed, self.message, self.traceback = status, 100, 1.0, "", None
        self.compile, self.exit_code, self.returncode = None, None, 0


class _Job:
    def __init__(self, results):
        self.results, self.elapsed, self.message = results, 3.0, ""


def test_a_job_run_takes_the_slowest_rank_step_by_step_and_keeps_every_rank_s_losses():
    job = _Job([_Result([0.1, 0.3, 0.1], [1.0, 0.9, 0.8, 0.7]), _Result([0.2, 0.1, 0.2], [2.0, 1.9, 1.8, 1.7])])
    run = run_from_job(job, 3)
    assert run.ok and run.step_times == [0.2, 0.3, 0.2]
    assert run.rank_losses == [[1.0, 0.9, 0.8, 0.7], [2.0, 1.9, 1.8, 1.7]] and run.losses == [1.0, 0.9, 0.8, 0.7]
    failed = run_from_job(_Job([_Result([0.1], [1.0, 0.9]), _Result([], [1.0], status="error")]), 3)
    assert not failed.ok and failed.message.startswith("rank 1:")


def test_cli_refuses_a_rank_count_below_one(cli):
    out = cli("tune", str(TUNE / "tiny_train.py"), "--nproc-per-node", "0")
    assert out.returncode == 2 and "--nproc-per-node must be >= 1, got 0" in out.stderr
