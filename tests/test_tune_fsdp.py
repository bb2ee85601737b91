"""Tune's sharding knobs (PIT706: FSDP2 instead of DDP; PIT705: FSDP2 prefetch / keep gathered).

One A/B pair of real 2-rank torchrun jobs (gloo, CPU) as ``pitstop tune --nproc-per-node 2`` runs
them: the DDP script unchanged, then with the FSDP2 knob applied in every rank before the script.
The knob's child setup and the FSDP2 settings are also checked in process on a one-rank group.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import ROOT
from pitstop.tips.pit705_fsdp_overlap import Fsdp2SettingsKnob
from pitstop.tips.pit706_shard_state import ShardKnob
from pitstop.tune.equivalence import check_losses
from pitstop.tune.knob import Context

TRAIN = str(ROOT / "tests" / "fixtures" / "fsdp" / "train.py")


@pytest.mark.slow
def test_ddp_vs_fsdp2_each_rank_s_step_peak_and_loss(tmp_path):
    from pitstop.tune.job import JobBackend

    base_dir, trial_dir = tmp_path / "ddp", tmp_path / "fsdp2"
    knob = ShardKnob()
    ctx = Context(strategy="ddp", world_size=2)
    assert knob.applies(ctx) and knob.recipe_fields("fsdp2", ctx) == {"strategy": "fsdp2"}
    runs = {}
    for name, folder, settings in (("ddp", base_dir, ()), ("fsdp2", trial_dir, (knob.setting("fsdp2"),))):
        folder.mkdir()
        backend = JobBackend(TRAIN, args=("--ddp", "--accum", "2", "--report", str(folder)), nproc_per_node=2,
                             timeout=240)
        backend.ctx = ctx
        runs[name] = backend.run(settings, [knob], steps=4, warmup=1, timeout=240)
    base, trial = runs["ddp"], runs["fsdp2"]
    assert base.ok and trial.ok, (base.message, trial.message)
    # the trial's ranks trained FSDP2 shards (DDP(...) returned the sharded module), the baseline's DDP
    assert [(base_dir / f"rank{r}.txt").read_text().split() for r in (0, 1)] == [["DistributedDataParallel", "Parameter"]] * 2
    assert [(trial_dir / f"rank{r}.txt").read_text().split() for r in (0, 1)] == [["FSDPNet", "DTensor"]] * 2
    for run in (base, trial):  # each rank's median step and peak memory, side by side
        assert len(run.rank_step_times) == len(run.rank_peaks) == 2 and all(run.rank_peaks)
        assert all(t and t > 0 for t in run.rank_step_times) and len(run.rank_losses) == 2
        assert run.to_dict()["rank_peaks"] == run.rank_peaks
    for r in (0, 1):  # the same math on every rank (no_sync() included): the loss check holds
        check = check_losses([base.rank_losses[r]], [trial.rank_losses[r]])
        assert check.status == "ok", check.message


def test_the_knobs_apply_where_they_can_and_say_why_not_elsewhere():
    shard, settings = ShardKnob(), Fsdp2SettingsKnob()
    assert not shard.applies(Context(strategy="fsdp2", world_size=2))
    assert "one rank" in shard.applies(Context(strategy="ddp", world_size=1)).reason
    assert "does not shard with FSDP2" in settings.applies(Context(strategy="ddp", world_size=2)).reason
    ctx = Context(strategy="fsdp2", world_size=2)
    assert settings.applies(ctx) and settings.values(ctx) == ["prefetch", "keep-gathered"]
    assert settings.recipe_fields("keep-gathered", ctx) == {"strategy": "fsdp2", "reshard_after_forward": False}
    assert "set_modules_to_forward_prefetch" in settings.snippet("prefetch", ctx)
    assert "fully_shard(block)" in shard.snippet("fsdp2", Context(strategy="ddp", world_size=2))


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_fsdp2_settings_set_prefetch_and_keep_units_gathered(one_rank_group):
    from pitstop.engine.sharded import shard_model
    from pitstop.engine.sharded import fsdp2_settings, units_of

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 2))
    plan = shard_model(model, torch.device("cpu"))
    assert plan.units == ("0", "2", "3", "") and plan.resharded == ("0", "2")  # not the last block
    blocks = units_of(model)
    fsdp2_settings(model, "prefetch")
    state = [b._get_fsdp_state() for b in blocks]
    assert [s._states_to_forward_prefetch for s in state[:-1]] == [[state[1]], [state[2]]]
    assert state[2]._states_to_backward_prefetch == [state[1]]
    fsdp2_settings(model, "keep-gathered")
    assert all(s._fsdp_param_group.post_forward_mesh_info is None for s in state)
    model(torch.randn(2, 4)).sum().backward()  # still trains
    with pytest.raises(ValueError, match="no FSDP2 unit below its root"):
        fsdp2_settings(nn.Linear(2, 2), "prefetch")
