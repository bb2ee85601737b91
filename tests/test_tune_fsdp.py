"""Tune's sharding knobs (PIT706: FSDP2 instead of DDP; PIT705: FSDP2 prefetch / keep gathered):
what they apply to, and the FSDP2 settings checked in process on a one-rank group. The PIT706
knob's real trial job (2 ranks, gloo) is in tests/test_doctor_fsdp.py, whose DDP job is its
baseline."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pitstop.tips.pit705_fsdp_overlap import Fsdp2SettingsKnob
from pitstop.tips.pit706_shard_state import ShardKnob
from pitstop.tune.knob import Context


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
