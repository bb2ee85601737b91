"""``pitstop doctor --nproc-per-node 2`` on sharded jobs (issue 43): real 2-rank gloo jobs under
torch.distributed.run of tests/fixtures/fsdp/train.py, five in all (each ~10 CPU-s), shared by
the tests below through module fixtures:

- FSDP2 with one unit at the root only, and FSDP2 per block (its per-rank traces kept: the real
  CPU gloo trace ``pitstop trace`` reads): the doctor tells them apart and names each one's fix;
- FSDP1 (``FullyShardedDataParallel``) per block;
- DDP of the same model: PIT706's per-rank bytes under FSDP2, predicted from the DDP job's sizes,
  against what the FSDP2 job measured; and the baseline of one tune trial job (PIT706's knob),
  the fifth job.

Lightning's FSDPStrategy, Accelerate's FSDP plugin and the HF Trainer's ``fsdp=`` refuse a CPU
(docs/guide/fsdp.md quotes them): FSDP1 is tested as those frameworks build it, directly.
"""

from __future__ import annotations

import pytest

from conftest import ROOT
from pitstop.doctor.analysis.job import diagnose_job
from pitstop.doctor.analysis.sharding import per_rank_bytes
from pitstop.doctor.run.spec import RunSpec
from pitstop.doctor.run.torchrun import run_job

pytestmark = pytest.mark.slow

TRAIN = str(ROOT / "tests" / "fixtures" / "fsdp" / "train.py")


def _job(*args: str, trace_dir: str | None = None, raw: bool = False, trace_steps: int = 2):
    spec = RunSpec(script=TRAIN, args=args, steps=4, warmup=1, timeout=240.0, nproc_per_node=2, stdout="devnull",
                   probes=False, trace_dir=trace_dir, trace_steps=trace_steps)
    job = run_job(spec)
    return (diagnose_job(job), job) if raw else diagnose_job(job)


@pytest.fixture(scope="module")
def root():
    return _job("--wrap", "root")


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    traces = tmp_path_factory.mktemp("fsdp_traces")
    # the script's 10 steps end inside the 3 traced steps asked for: the tracer writes its files
    # after the script's destroy_process_group, yet each rank must write its own (the GPU check's
    # FSDP2 rehearsal once wrote one file for both), and the trace must hold the 2 traced steps
    # that ended, not the script's end as a third
    return _job("--wrap", "block", "--steps", "10", trace_dir=str(traces), trace_steps=3), traces


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """The DDP job, accumulating 2 micro-batches under no_sync(); also the baseline of the tune
    trial below (same script and arguments: the same losses, rank by rank)."""
    report = tmp_path_factory.mktemp("ddp_report")
    diag, job = _job("--ddp", "--accum", "2", "--report", str(report), raw=True)
    return diag, job, report


def _pit705(diag):
    return [f for f in diag.findings if f.code == "PIT705"]


def _shards(diag):
    return [r.shard for r in diag.observations.distributed.ranks]


def test_root_only_and_per_block_fsdp2_are_told_apart_with_each_fix(root, block):
    diag, _ = block
    for d in (root, diag):
        assert d.to_dict()["outcome"] == "diagnosed" and d.world_size == 2
    r0, b0 = _shards(root)[0], _shards(diag)[0]
    assert r0.framework == b0.framework == "fsdp2" and r0.world_size == 2
    assert [u.name for u in r0.units] == [""] and r0.root_only
    assert r0.blocks == ("blocks.0", "blocks.1", "blocks.2", "blocks.3")
    assert [u.name for u in b0.units] == ["", "blocks.0", "blocks.1", "blocks.2", "blocks.3"] and not b0.root_only
    # root only: one all-gather per step (the root stays gathered); per block: forward, then again in
    # backward for every block resharded after forward (all four here), plus the root
    assert set(r0.all_gathers) == {1} and set(b0.all_gathers) == {9} and set(b0.reduce_scatters) == {5}
    assert all(u.all_gather_s > 0 and u.all_gathers == 2 for u in b0.units[1:])
    assert b0.all_gather_bytes[0] == pytest.approx(2 * r0.all_gather_bytes[0], rel=0.01)
    (f,) = _pit705(root)
    assert f.title.endswith("root only") and "for block in model.blocks: fully_shard(block)" in f.fix
    assert "[all 2 ranks]" in f.evidence and "4 blocks (blocks.0, blocks.1, blocks.2 ...)" in f.evidence
    (g,) = _pit705(diag)
    assert "root only" not in g.title and "fully_shard(block)" not in g.fix
    assert g.title.endswith("fp32 all-gathers") and "reshard_after_forward=False" in g.fix
    # the waits are split out of forward and backward into the collective phase of each rank
    for d, shards in ((root, _shards(root)), (diag, _shards(diag))):
        for view, shard in zip(d.ranks(), shards):
            assert view.breakdown["collective"] == pytest.approx(shard.mean("all_gather_s") + shard.mean("reduce_scatter_s"),
                                                                 rel=0.05)
    # memory per rank: the parameter shards are half the whole parameters (sharded, none replicated)
    assert b0.local_param_bytes == pytest.approx(b0.full_param_bytes / 2, rel=0.01) and b0.replicated_param_bytes == 0
    assert diag.observations.memory.params == b0.local_param_bytes


def test_the_real_cpu_gloo_trace_of_an_fsdp2_job_is_read_per_kind_and_unit(block):
    from pitstop.trace import trace

    diag, traces = block
    assert sorted(p.name for p in traces.iterdir()) == ["pitstop_trace_rank0.json", "pitstop_trace_rank1.json"]
    assert any("ended inside the traced steps: the trace holds the 2 traced steps" in n
               for n in diag.to_dict()["notes"])
    report = trace([traces], workers=1)
    for r in report.ranks:
        c = r.collectives
        assert c.source == "host (blocking collectives)" and c.sharding == "fsdp2" and not c.root_only
        assert c.kind("all_gather").calls_per_step == 9 and c.kind("reduce_scatter").calls_per_step == 5
        assert {u.unit for u in c.units} == {"", "blocks.0", "blocks.1", "blocks.2", "blocks.3"}
        assert 0 < c.fsdp_exposed_share < 1 and len(c.fsdp_exposed_per_step) == r.steps == 2
    assert [f for f in report.findings if f.code == "PIT705"]


def test_fsdp1_per_block_is_recognised_with_its_settings():
    diag = _job("--fsdp1")
    assert diag.to_dict()["outcome"] == "diagnosed"
    s = _shards(diag)[0]
    assert s.framework == "fsdp1" and s.sharding == "FULL_SHARD" and s.backward_prefetch == "BACKWARD_PRE"
    assert sorted(u.name for u in s.units) == ["", "blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    assert set(s.all_gathers) == {9} and set(s.reduce_scatters) == {5}
    (f,) = _pit705(diag)
    assert "root only" not in f.title and "MixedPrecision(param_dtype=bfloat16)" in f.fix


def test_pit706_predicts_the_per_rank_bytes_a_real_fsdp2_run_measures(ddp, block):
    diag = ddp[0]
    (f,) = [f for f in diag.findings if f.code == "PIT706"]
    assert "[all 2 ranks]" in f.evidence and "Recipe(strategy='fsdp2')" in f.fix
    m = diag.observations.memory
    predicted = per_rank_bytes(m.params, m.grads, m.optimizer_state, 2).state
    assert f"each would hold {predicted / 2**20:.1f} MiB" in f.evidence
    measured = block[0].observations.memory  # rank 0 of the FSDP2 job: shards of params, grads, AdamW state
    real = measured.params + measured.grads + measured.optimizer_state
    assert real == pytest.approx(predicted, rel=0.05)
    assert real < 0.55 * (m.params + m.grads + m.optimizer_state)  # what DDP holds on every rank
    assert not [f for f in block[0].findings if f.code == "PIT706"]  # sharded already


def test_tune_s_fsdp2_trial_of_the_ddp_job_trains_shards_with_every_rank_s_losses_equal(ddp, tmp_path):
    """``pitstop tune --nproc-per-node 2``'s run of the PIT706 knob (DDP(...) returns the module
    sharded by FSDP2 in every rank): one trial job, its baseline the DDP job above (a doctor run of
    the same script and arguments; only losses and per-rank fields are compared, not speed)."""
    from pitstop.tips.pit706_shard_state import ShardKnob
    from pitstop.tune.equivalence import check_losses
    from pitstop.tune.job import JobBackend, run_from_job
    from pitstop.tune.knob import Context

    _, job, report = ddp
    knob = ShardKnob()
    backend = JobBackend(TRAIN, args=("--ddp", "--accum", "2", "--report", str(tmp_path)), nproc_per_node=2,
                         timeout=240)
    backend.ctx = Context(strategy="ddp", world_size=2)
    trial = backend.run((knob.setting("fsdp2"),), [knob], steps=4, warmup=1, timeout=240)
    base = run_from_job(job, 4)
    assert base.ok and trial.ok, (base.message, trial.message)
    # the trial's ranks trained FSDP2 shards (DDP(...) returned the sharded module), the baseline's DDP
    assert [(report / f"rank{r}.txt").read_text().split() for r in (0, 1)] == [["DistributedDataParallel",
                                                                                 "Parameter"]] * 2
    assert [(tmp_path / f"rank{r}.txt").read_text().split() for r in (0, 1)] == [["FSDPNet", "DTensor"]] * 2
    for run in (base, trial):  # each rank's median step and peak memory, side by side
        assert len(run.rank_step_times) == len(run.rank_peaks) == 2 and all(run.rank_peaks)
        assert all(t and t > 0 for t in run.rank_step_times) and len(run.rank_losses) == 2
        assert run.to_dict()["rank_peaks"] == run.rank_peaks
    for r in (0, 1):  # the same math on every rank (no_sync() included): the loss check holds
        check = check_losses([base.rank_losses[r]], [trial.rank_losses[r]])
        assert check.status == "ok", check.message
