"""``Recipe(strategy="fsdp2")``: FSDP2 through the engine, real torchrun + gloo jobs on CPU (two
jobs for every subject: tests/fixtures/engine/fsdp_train.py), plus the plain-Python parts
(recipe fields, which submodules become units, the optimizer rebuilt) in process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

from conftest import FIXTURES
from pitstop.engine import Recipe
from pitstop.engine.recipe import RecipeError
from pitstop.engine.ckptdir import remove_sharded, sharded_name
from pitstop.engine.sharded import rebuild_optimizer, shard_blocks

SCRIPT = str(FIXTURES / "engine" / "fsdp_train.py")


def _torchrun(nproc: int, *args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(nproc), SCRIPT, *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_train")
    _torchrun(2, "train", str(out))
    return out, torch.load(out / "result.pt", weights_only=True)


@pytest.mark.slow
def test_fsdp2_trains_like_ddp_shards_per_block_and_resumes_bitwise(trained):
    out, r = trained
    assert r["world_size"] == 2
    assert r["units"] == ["", "blocks.0", "blocks.1", "blocks.2"]  # the root and one unit per block
    # same global batches, accumulation (set_requires_gradient_sync) and clipping on DTensors:
    # the losses of 6 optimizer steps equal DDP's up to float summation order
    assert len(r["ddp"]) == len(r["fsdp"]) == 6
    assert r["fsdp"] == pytest.approx(r["ddp"], rel=1e-5, abs=1e-6)
    assert r["fsdp"][0] != r["fsdp"][-1]  # it trained
    # stopped after step 3, a fresh model and optimizer resumed from the sharded checkpoint:
    # losses and the final model equal the uninterrupted run's, bit for bit
    assert r["resumed_from"] == "step-000000003.pt"
    assert r["stopped"] + r["resumed"] == r["fsdp"]
    assert set(r["full6"]) == set(r["resumed6"])
    assert all(torch.equal(r["full6"][k], r["resumed6"][k]) for k in r["full6"])
    # a checkpoint is the rank-0 .pt file and the directory of every rank's shards; the .pt
    # names the directory and holds no model
    assert r["dcp"] == ["pitstop-checkpoints.json"] + [f"step-00000000{s}.{e}" for s in (2, 4, 6) for e in ("dcp", "pt")]
    pt = torch.load(out / "U" / "step-000000006.pt", weights_only=True)
    assert pt["sharded"] == "step-000000006.dcp" and "model" not in pt and "optimizer" not in pt
    assert sorted(p.name for p in (out / "U" / "step-000000006.dcp").iterdir()) == [".metadata", "__0_0.distcp",
                                                                                   "__1_0.distcp"]


@pytest.mark.slow
def test_a_two_rank_checkpoint_resumes_on_three_ranks(trained, tmp_path):
    out, r = trained
    ckpt = tmp_path / "R"
    ckpt.mkdir()
    for name in ("step-000000004.pt", "step-000000004.dcp"):
        src = out / "U" / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, ckpt / name)
    (ckpt / ".step-000000005.dcp.pitstop-tmp").mkdir()  # a killed writer's leftover: never read
    _torchrun(3, "reshard", str(ckpt), str(tmp_path))
    got = torch.load(tmp_path / "result.pt", weights_only=True)
    assert got["world_size"] == 3 and got["resumed_from"] == "step-000000004.pt"
    # every rank read its slices of the 2-rank shards: the whole model equals the one saved at step 4
    assert set(got["loaded"]) == set(r["full4"])
    assert all(torch.equal(got["loaded"][k], r["full4"][k]) for k in r["full4"])
    assert got["local_rows"][0] == (11, 8)  # 32 rows over 3 ranks: 11 per rank (padded)
    assert got["steps"] == 6 and len(got["losses"]) == 2 and all(x == x and x < 10 for x in got["losses"])


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.norms = nn.ModuleList([nn.LayerNorm(8) for _ in range(3)])  # fewer parameters: not the blocks
        self.head = nn.Linear(8, 2)


def test_blocks_are_the_largest_module_list_or_the_named_units():
    assert shard_blocks(Tiny()) == ["layers.0", "layers.1", "layers.2"]
    assert shard_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))) == ["0", "2"]
    assert shard_blocks(Tiny(), ("layers.*", "head")) == ["layers.0", "layers.1", "layers.2", "head"]
    with pytest.raises(ValueError, match="matches no submodule"):
        shard_blocks(Tiny(), ("decoder.*",))


def test_the_optimizer_is_rebuilt_on_new_parameters_with_its_groups():
    model = Tiny()
    opt = torch.optim.AdamW([{"params": model.layers.parameters(), "lr": 0.1},
                             {"params": model.head.parameters(), "weight_decay": 0.0}], lr=0.01, betas=(0.8, 0.9))
    before = {id(p): n for n, p in model.named_parameters()}
    for name, p in list(model.named_parameters()):  # what fully_shard does: new Parameter objects
        module, leaf = model.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
        setattr(module, leaf, nn.Parameter(p.detach().clone()))
    new = rebuild_optimizer(opt, before, model)
    assert type(new) is torch.optim.AdamW and new.defaults["betas"] == (0.8, 0.9)
    assert [g["lr"] for g in new.param_groups] == [0.1, 0.01] and new.param_groups[1]["weight_decay"] == 0.0
    assert new.param_groups[1]["params"][0] is model.head.weight
    opt.state[model.head.weight] = {"step": torch.tensor(1.0)}  # an optimizer that has stepped
    with pytest.raises(ValueError, match="has not stepped yet"):
        rebuild_optimizer(opt, before, model)


def test_recipe_fsdp_fields_are_validated_and_round_trip(tmp_path):
    r = Recipe(strategy="fsdp2", shard_units="layers.*", reshard_after_forward=False, shard_prefetch=True)
    assert r.shard_units == ("layers.*",)
    assert Recipe.load(r.save(tmp_path / "r.toml")) == r == Recipe.from_dict(r.to_dict())
    with pytest.raises(RecipeError, match="strategy must be one of 'ddp', 'fsdp2'; got 'fsdp'"):
        Recipe(strategy="fsdp")
    with pytest.raises(RecipeError, match="shard_prefetch=True apply to strategy='fsdp2' only"):
        Recipe(shard_prefetch=True)
    with pytest.raises(RecipeError, match="reshard_after_forward must be true or false"):
        Recipe(strategy="fsdp2", reshard_after_forward="no")


def test_a_sharded_part_is_named_after_its_file_and_removed_with_it(tmp_path):
    assert sharded_name("step-000000004.pt") == "step-000000004.dcp"
    part = tmp_path / "step-000000004.dcp"
    part.mkdir()
    (part / "__0_0.distcp").write_bytes(b"x")
    remove_sharded(tmp_path / "step-000000004.pt")
    assert not part.exists()


def test_fsdp2_without_a_process_group_says_how_to_launch():
    from pitstop.engine import make_step

    model = Tiny()
    with pytest.raises(RuntimeError, match="init_distributed.*torchrun"):
        make_step(nn.Sequential(model.embed, *model.layers), torch.optim.SGD(model.parameters(), lr=0.1),
                  lambda m, b: m(b).sum(), Recipe(strategy="fsdp2"))
