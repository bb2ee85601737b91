"""Every doctor check on synthetic observations: one case that fires, one that does not.

The observations come from ``doctor_obs`` (built through the public ``Observations`` API
only). ``test_every_registered_check_has_a_case`` fails when a new check lands without a
case here. The real-run tests (``test_doctor_examples``, ``test_doctor_misc_problems``) show
the checks fire on real scripts; these show each check's decision boundary.
"""

from __future__ import annotations

import pytest
from doctor_obs import findings_of, loader, model, observations, optimizer, probe, run_check, site

from pitstop import catalog
from pitstop.doctor.analysis.check import Check, Thresholds
from pitstop.doctor.analysis.probe import Probe

catalog.load_all()
CHECKS = {c.__name__: c for c in catalog.implementations("D") if issubclass(c, Check)}
PROBES = {c.__name__: c for c in catalog.implementations("D") if issubclass(c, Probe)}

MIB = 2**20


def _rank(rank: int, **fields) -> dict:
    """One rank's distributed record (JSON form) of a healthy 5-step DDP rank."""
    base = {"rank": rank, "world_size": 2, "initialized": True, "backend": "gloo", "waits": [0.002] * 5,
            "reduction_waits": [0.002] * 5, "reductions": [1] * 5, "buckets": [1] * 5,
            "allreduce_bytes": [4 * MIB] * 5, "backwards": [1] * 5, "reduction_source": "pitstop comm hook",
            "fingerprints": {str(i): f"{rank}{i:07x}" for i in range(7)}}
    return {**base, **fields}


def _job(*ranks: dict, **fields) -> dict:
    return {"world_size": len(ranks), "ranks": list(ranks), "step_means": [0.1] * len(ranks), **fields}


def _shard(**fields) -> dict:
    """A 2-rank FSDP2 record (JSON form): 5 steps of 30 ms all-gathers and 10 ms reduce-scatters."""
    unit = {"numel": 1000, "full_bytes": 4000, "local_bytes": 2000}
    units = [{"name": "", **unit, "numel": 10}] + [{"name": f"layers.{i}", **unit, "all_gather_s": 0.015,
                                                    "all_gathers": 2.0} for i in range(2)]
    base = {"framework": "fsdp2", "world_size": 2, "units": units, "blocks": ["layers.0", "layers.1"],
            "stored_dtype": "float32", "param_dtype": "bfloat16", "sharding": "FULL_SHARD",
            "all_gather_s": [0.03] * 5, "reduce_scatter_s": [0.01] * 5, "all_gather_bytes": [4 * MIB] * 5,
            "reduce_scatter_bytes": [4 * MIB] * 5, "all_gathers": [3] * 5, "reduce_scatters": [3] * 5,
            "forward_wait": [0.015] * 5, "backward_wait": [0.025] * 5}
    return {**base, **fields}


ROOT_ONLY = [{"name": "", "numel": 2010, "full_bytes": 8040, "local_bytes": 4020, "reshard_after_forward": False}]
STATE = {"params": 100 * MIB, "grads": 100 * MIB, "optimizer_state": 200 * MIB, "activations": 50 * MIB,
         "peak": 600 * MIB, "capacity": 16 * 1024 * MIB}
SAME = {str(i): f"{i:08x}" for i in range(7)}
STRAGGLER = {"rank": 1, "phase": "data", "lag": 0.05, "late_steps": 5, "steps": 5,
             "evidence": "the other ranks waited 50.0 ms (median) for rank 1 ..."}
CUDA_H2D = {"blocking": 2.0, "non_blocking": 0.0, "seconds": 0.004}

#: PIT108: a 2-core CPU run with 2 intra-op threads whose threads waited 40% of the step for a core
#: while other processes kept 1.3 cores busy, and the same run on a quiet machine
LOADED = {"threads_busy": 2, "thread_wait_per_step": 0.08, "wait_share": 0.4, "others_cores": 1.3,
          "workers_cores": 0.0, "machine_cores": 2}
QUIET = {**LOADED, "thread_wait_per_step": 0.004, "wait_share": 0.02, "others_cores": 0.05}
TWO_CORES = {"num_threads": 2, "cpu_cores": 2}

#: check name -> (observations where it fires, observations where it does not)
CASES = {
    "CpuThreadsCheck": (
        observations(cpu=LOADED, settings=TWO_CORES),
        observations(cpu=QUIET, settings=TWO_CORES),
    ),
    "DataWaitCheck": (
        observations(breakdown={"data": 0.03}, loaders=[loader()]),
        observations(breakdown={"data": 0.004}, loaders=[loader()]),  # 4% < 5%
    ),
    "HostBatchCheck": (
        observations(breakdown={"host": 0.03}, host_sites=[{"where": "train.py:42", "share": 0.8, "samples": 40}]),
        observations(breakdown={"host": 0.03}, step_boundary="backward"),  # manual updates: host holds the update
    ),
    "PinMemoryCheck": (
        observations(device="cuda", loaders=[loader(pin_memory=False)], h2d=CUDA_H2D),
        observations(device="cuda", loaders=[loader(pin_memory=True)], h2d=CUDA_H2D),
    ),
    "NonBlockingCheck": (
        observations(device="cuda", h2d=CUDA_H2D),
        observations(device="cuda", h2d={"blocking": 0.0, "non_blocking": 2.0, "seconds": 0.001}),
    ),
    "ChannelsLastCheck": (
        observations(models=[model(conv2d=3)], kernels={"conv_nchw": 3},
                     probes={"channels_last": probe("contiguous", "channels_last", 1.3)}),
        observations(models=[model(conv2d=3)], kernels={"conv_nchw": 3},
                     probes={"channels_last": probe("contiguous", "channels_last", 1.05)}),  # low < 1.10
    ),
    "SyncInLoopCheck": (
        observations(syncs=[site("item")]),
        observations(syncs=[site("item", every=1)]),  # 1 of 5 steps: not per step
    ),
    "RetainedGraphCheck": (
        observations(graph={"nodes": [10, 40, 70], "steps": [0, 2, 4], "live_losses": 0, "losses_tracked": 5}),
        observations(graph={"nodes": [10, 10, 10], "steps": [0, 2, 4], "live_losses": 1, "losses_tracked": 5}),
    ),
    "SyncCallsCheck": (
        observations(cuda_calls=[site("cuda.empty_cache")]),
        observations(cuda_calls=[site("cuda.reset_max_memory_allocated")]),  # PIT405's, not a sync
    ),
    "MixedPrecisionCheck": (
        observations(models=[model()], probes={"precision": probe("fp32", "bfloat16", 1.4)}),
        observations(models=[model()], probes={"precision": probe("fp32", "bfloat16", 1.02)}),
    ),
    "TF32Check": (
        observations(device="cuda", kernels={"matmul": {"float32": 10}}),
        observations(device="cuda", kernels={"matmul": {"float32": 10}}, capability=[7, 0]),  # pre-Ampere
    ),
    "Fp16WithoutScalerCheck": (
        observations(forwards={"train": 5, "autocast": {"float16": 5}}),
        observations(forwards={"train": 5, "autocast": {"float16": 5}}, scaler_calls=5),
    ),
    "ActivationMemoryCheck": (
        observations(memory={"peak": 95 * MIB, "capacity": 100 * MIB, "params": 10 * MIB, "grads": 10 * MIB,
                             "optimizer_state": 10 * MIB, "activations": 60 * MIB}),
        observations(memory={"peak": 50 * MIB, "capacity": 100 * MIB, "params": 10 * MIB, "grads": 10 * MIB,
                             "optimizer_state": 10 * MIB, "activations": 60 * MIB}),  # not near capacity
    ),
    "OptimizerStateCheck": (
        observations(optimizers=[optimizer(state_bytes=40 * MIB)],
                     memory={"params": 10 * MIB, "grads": 10 * MIB, "optimizer_state": 40 * MIB,
                             "activations": 10 * MIB, "peak": 80 * MIB, "capacity": 1000 * MIB}),
        observations(optimizers=[optimizer(cls="SGD", state_bytes=0, state_ratio=0.0)],
                     memory={"params": 10 * MIB, "grads": 10 * MIB, "optimizer_state": 0,
                             "activations": 10 * MIB, "peak": 40 * MIB, "capacity": 1000 * MIB}),
    ),
    "PeakMemoryCheck": (
        observations(memory={"peak": 95 * MIB, "capacity": 100 * MIB, "peak_source": "process peak RSS"}),
        observations(memory={"peak": 50 * MIB, "capacity": 100 * MIB, "peak_source": "process peak RSS"}),
    ),
    "FusedOptimizerCheck": (
        observations(optimizers=[optimizer(mode="foreach")], probes={"optimizer": probe("foreach", "fused", 1.5)}),
        observations(optimizers=[optimizer(mode="foreach")], probes={"optimizer": probe("foreach", "fused", 1.02)}),
    ),
    "DecayOnBiasNormCheck": (
        observations(optimizers=[optimizer(decay_1d_params=4, decay_1d_numel=96, weight_decay=0.01)]),
        observations(optimizers=[optimizer(weight_decay=0.01)]),
    ),
    "FrozenParamsCheck": (
        observations(optimizers=[optimizer(frozen_params=2, frozen_numel=20)]),
        observations(optimizers=[optimizer()]),
    ),
    "CompileCheck": (
        observations(compile={"compiled": True, "graph_breaks": 0, "compile_s": 3.0, "compile_s_observed": 0.5}),
        observations(compile={"compiled": True, "graph_breaks": 0, "compile_s": 3.0}),
    ),
    "GraphBreakCheck": (
        observations(compile={"compiled": True, "graph_breaks": 1, "breaks": [
            {"reason": "Unsupported Tensor.item() call", "where": "train.py:22", "function": "forward"}]}),
        observations(compile={"compiled": True, "graph_breaks": 0}),
    ),
    "RecompileCheck": (
        observations(compile={"compiled": True, "graph_breaks": 0, "recompiles": [
            {"function": "forward", "where": "lm.py:21", "guard": "tensor 'ids' size mismatch at index 1",
             "example": "tensor 'ids' size mismatch at index 1. expected 8, actual 9", "count": 8}],
            "limit_hits": [{"function": "forward", "where": "lm.py:21", "limit": 8}]}),
        observations(compile={"compiled": True, "graph_breaks": 0, "recompiles": [
            {"function": "forward", "where": "lm.py:21", "guard": "g", "example": "g", "count": 1}]}),
    ),
    "CudnnBenchmarkCheck": (
        observations(device="cuda", kernels={"conv": {"float32": 4}, "conv_input_shapes": {"32x3x32x32": 5}}),
        observations(device="cuda", kernels={"conv": {"float32": 4},
                                             "conv_input_shapes": {"32x3x32x32": 4, "7x3x32x32": 1}}),
    ),
    "ConvBiasBeforeBNCheck": (
        observations(models=[model(conv2d=1, conv_bias_bn=[["conv1", "bn1"]])]),
        observations(models=[model(conv2d=1)]),
    ),
    "MultipleOf8Check": (
        observations(device="cuda", kernels={"matmul": {"bfloat16": 4}},
                     models=[model(odd_sizes=[{"module": "fc", "type": "Linear", "out_features": 10, "multiple": 8}])]),
        observations(device="cuda", kernels={"matmul": {"float32": 4}},  # fp32 at "highest": no tensor cores
                     models=[model(odd_sizes=[{"module": "fc", "type": "Linear", "out_features": 10, "multiple": 8}])]),
    ),
    "InferenceModeCheck": (
        observations(forwards={"train": 5, "eval_with_grad": 3, "where": {"eval_with_grad": "train.py:30"}}),
        observations(forwards={"train": 5, "eval_inference_mode": 3, "where": {"eval_inference_mode": "train.py:30"}}),
    ),
    "AdjacentLinearCheck": (
        observations(models=[model(linear_linear=[{"pair": ["fc1", "fc2"], "saved_macs": 100, "macs": 300}])]),
        observations(models=[model()]),
    ),
    "DataParallelCheck": (
        observations(models=[model("DataParallel", dataparallel=True)]),
        observations(models=[model()]),
    ),
    "DistributedSamplerCheck": (
        observations(models=[model(ddp=True)], loaders=[loader()], settings={"world_size": 2}),
        observations(models=[model(ddp=True)], loaders=[loader(distributed_sampler=True, sampler="DistributedSampler")],
                     settings={"world_size": 2}),
    ),
    "DdpNoSyncCheck": (
        observations(distributed=_job(*(_rank(r, reductions=[4] * 5, backwards=[4] * 5, buckets=[4] * 5,
                                              reduction_waits=[0.02] * 5) for r in (0, 1)))),
        observations(distributed=_job(*(_rank(r, reductions=[1] * 5, backwards=[4] * 5) for r in (0, 1)))),  # no_sync
    ),
    "SameBatchesCheck": (
        observations(loaders=[loader()], distributed=_job(_rank(0, fingerprints=SAME), _rank(1, fingerprints=SAME))),
        observations(loaders=[loader(distributed_sampler=True, sampler="DistributedSampler")],
                     distributed=_job(_rank(0, sampler_epochs=[0, 1]), _rank(1, sampler_epochs=[0, 1]))),
    ),
    "FsdpExposedCheck": (
        observations(distributed=_job(_rank(0, shard=_shard(units=ROOT_ONLY)))),  # one unit at the root
        # one unit per block, bf16 all-gathers, the last block kept gathered: no cause left on CPU
        observations(distributed=_job(_rank(0, shard=_shard(units=[
            {"name": "", "numel": 10}, {"name": "layers.0", "numel": 1000},
            {"name": "layers.1", "numel": 1000, "reshard_after_forward": False}])))),
    ),
    "ReplicatedStateCheck": (
        observations(models=[model(ddp=True)], memory=STATE, distributed=_job(_rank(0, block_bytes=[50 * MIB] * 2))),
        observations(models=[model(ddp=True)], memory={**STATE, "activations": 800 * MIB},  # activations dominate
                     distributed=_job(_rank(0, block_bytes=[50 * MIB] * 2))),
    ),
    "StragglerCheck": (
        observations(distributed=_job(_rank(0), _rank(1), stragglers=[STRAGGLER])),
        observations(distributed=_job(_rank(0), _rank(1))),
    ),
    "EvalModeCheck": (
        observations(models=[model(mode_dependent=True, forwards={"train": 5, "nograd_train_mode": 3})],
                     forwards={"train": 5, "where": {"nograd_train_mode": "train.py:40"}}),
        observations(models=[model(mode_dependent=False, forwards={"train": 5, "nograd_train_mode": 3})]),
    ),
    "DeterministicBenchmarkCheck": (
        observations(settings={"cudnn_deterministic": True, "cudnn_benchmark": True}),
        observations(settings={"cudnn_deterministic": True, "cudnn_benchmark": False}),
    ),
    "ProfileCheck": (
        observations(breakdown={"forward": 0.02, "backward": 0.02}),  # 50% of the step is "other"
        observations(),
    ),
}


def test_every_registered_check_has_a_case():
    assert set(CHECKS) == set(CASES), f"no case for {sorted(set(CHECKS) - set(CASES))}; stale {sorted(set(CASES) - set(CHECKS))}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_fires_on_its_positive_case(name):
    cls = CHECKS[name]
    reason, found = run_check(cls, CASES[name][0])
    assert reason is None, reason
    assert found and all(f.code == cls.tip for f in found), found
    for f in found:
        assert f.evidence and f.fix.endswith(f"(`pitstop explain {cls.tip}`)")


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_is_quiet_on_its_negative_case(name):
    assert run_check(CHECKS[name], CASES[name][1])[1] == []


# -- what the cases above do not show: severity, skips, impacts ---------------------


def test_cuda_only_checks_are_skipped_on_cpu_with_the_reason():
    for name, cls in CHECKS.items():
        if cls.requires == "cuda":
            obs = CASES[name][0]
            cpu = observations(**{k: v for k, v in obs.to_dict().items() if k not in ("device", "device_name", "capability")})
            reason, found = run_check(cls, cpu)
            assert found == [] and "CUDA" in reason, name


def test_data_wait_is_high_with_spare_cores_and_low_without():
    spare = findings_of(CHECKS["DataWaitCheck"], observations(breakdown={"data": 0.03}, loaders=[loader()]))
    assert spare[0].severity == "high" and spare[0].impact_share == pytest.approx(0.3)
    busy = findings_of(CHECKS["DataWaitCheck"], observations(breakdown={"data": 0.03}, loaders=[loader()],
                                                             settings={"cpu_cores": 2, "num_threads": 2}))
    assert busy[0].severity == "low" and "take cores from compute" in busy[0].evidence
    no_loader = observations(breakdown={"data": 0.03})  # the wait is not a DataLoader's
    assert findings_of(CHECKS["DataWaitCheck"], no_loader) == []


def test_probe_gated_checks_use_the_lower_bound_on_the_compute_share():
    obs = observations(models=[model()], probes={"precision": probe("fp32", "bfloat16", 1.25, ratio=2.0)})
    [f] = findings_of(CHECKS["MixedPrecisionCheck"], obs)
    assert f.impact_share == pytest.approx(obs.compute_share * (1 - 1 / 1.25))
    skipped = observations(models=[model()], probes={"precision": {"skipped": "training already runs under autocast"}})
    assert findings_of(CHECKS["MixedPrecisionCheck"], skipped) == []
    stricter = Thresholds(probe_speedup=1.3)
    assert findings_of(CHECKS["MixedPrecisionCheck"], obs, stricter) == []


def test_fused_optimizer_ignores_a_probe_of_another_mode():
    """A probe whose baseline is not the optimizer's mode measured something else."""
    obs = observations(optimizers=[optimizer(mode="foreach")], probes={"optimizer": probe("for-loop", "fused", 1.5)})
    assert findings_of(CHECKS["FusedOptimizerCheck"], obs) == []


def test_channels_last_is_skipped_without_convolutions():
    reason, _ = run_check(CHECKS["ChannelsLastCheck"], observations(models=[model()]))
    assert reason and "Conv2d" in reason


def test_compile_check_is_skipped_for_an_eager_model():
    reason, _ = run_check(CHECKS["CompileCheck"], observations())
    assert reason and "not compiled" in reason


def test_peak_memory_also_reports_the_deprecated_reset_call():
    obs = observations(cuda_calls=[site("cuda.reset_max_memory_allocated", calls=3)])
    [f] = findings_of(CHECKS["PeakMemoryCheck"], obs)
    assert f.severity == "low" and "reset_peak_memory_stats" in f.fix and f.where == ("train.py:20",)


def test_gpu_only_effects_are_low_on_cpu_and_rated_on_cuda():
    flags = {"cudnn_deterministic": True, "cudnn_benchmark": True}
    assert findings_of(CHECKS["DeterministicBenchmarkCheck"], observations(settings=flags))[0].severity == "low"
    assert findings_of(CHECKS["DeterministicBenchmarkCheck"],
                       observations(device="cuda", settings=flags))[0].severity == "medium"
    cpu = findings_of(CHECKS["SyncCallsCheck"], observations(cuda_calls=[site("cuda.synchronize", seconds=0.05)]))
    assert cpu[0].severity == "low" and cpu[0].impact_seconds is None
    gpu = findings_of(CHECKS["SyncCallsCheck"],
                      observations(device="cuda", cuda_calls=[site("cuda.synchronize", seconds=0.03)]))
    assert gpu[0].impact_seconds == pytest.approx(0.006) and gpu[0].severity == "medium"  # 6% of the step


def test_profile_check_reports_low_mfu_on_a_known_gpu():
    obs = observations(device="cuda", flops={"mfu": 0.2, "achieved_per_s": 62e12, "peak_per_s": 312e12,
                                              "peak_source": "A100 bf16 dense"})
    [f] = findings_of(CHECKS["ProfileCheck"], obs)
    assert "MFU 20.0%" in f.evidence


def test_retained_graph_fires_on_live_losses_with_a_graph_that_grows():
    obs = observations(graph={"nodes": [10, 11, 12], "steps": [0, 2, 4], "live_losses": 4, "losses_tracked": 5})
    [f] = findings_of(CHECKS["RetainedGraphCheck"], obs)
    assert f.impact_kind == "memory" and "4 of the 5" in f.evidence
    # live outputs alone are no leak (issue 39: a compiled/graphed step keeps its static outputs)
    flat = observations(graph={"nodes": [10, 10, 10], "steps": [0, 2, 4], "live_losses": 4, "losses_tracked": 5})
    assert findings_of(CHECKS["RetainedGraphCheck"], flat) == []


def test_distributed_sampler_is_quiet_on_one_process():
    assert findings_of(CHECKS["DistributedSamplerCheck"], observations(loaders=[loader()])) == []


def test_job_checks_skip_outside_a_torchrun_job_and_on_independent_processes():
    for name in ("DdpNoSyncCheck", "SameBatchesCheck", "StragglerCheck"):
        reason, _ = run_check(CHECKS[name], observations())
        assert reason and "torchrun job" in reason
        reason, _ = run_check(CHECKS[name], observations(distributed=_job(_rank(0))))  # one rank: not merged
        assert reason and "torchrun job" in reason
    alone = _job(_rank(0, initialized=False, fingerprints=SAME), _rank(1, initialized=False, fingerprints=SAME))
    reason, _ = run_check(CHECKS["SameBatchesCheck"], observations(distributed=alone))
    assert "independent" in reason


def test_distributed_sampler_without_set_epoch_repeats_epoch_numbers():
    job = _job(_rank(0, sampler_epochs=[0, 0, 0]), _rank(1, sampler_epochs=[0, 0, 0]))
    (f,) = findings_of(CHECKS["SameBatchesCheck"], observations(distributed=job))
    assert "set_epoch" in f.title and f.severity == "medium"


def test_fsdp_findings_name_the_cause_and_the_numbers():
    (f,) = findings_of(CHECKS["FsdpExposedCheck"], CASES["FsdpExposedCheck"][0])
    assert f.title.endswith("root only") and "for block in model.layers: fully_shard(block)" in f.fix
    # on CPU the fix overlaps nothing (gloo blocks): measured, not sized as a saving
    assert "30.0 ms in 3 all-gather(s)" in f.evidence and f.severity == "medium" and f.impact_share is None
    # per block but fp32 all-gathers and the last block resharded: bf16 first, about half the all-gather time
    fp32 = observations(distributed=_job(_rank(0, shard=_shard(param_dtype=None))))
    (f,) = findings_of(CHECKS["FsdpExposedCheck"], fp32)
    assert f.title.endswith("fp32 all-gathers") and f.impact_share == pytest.approx(0.15)
    assert "MixedPrecisionPolicy(param_dtype=torch.bfloat16" in f.fix and "reshard_after_forward=False" in f.fix
    # CUDA: the calls return at once (launches), so a small host time does not hide a cause: the
    # trace of the profiled steps sizes it (gpu_role "trace")
    cuda = observations(device="cuda", distributed=_job(_rank(0, shard=_shard(
        param_dtype="bfloat16", all_gather_s=[0.001] * 5, reduce_scatter_s=[0.001] * 5))))
    (f,) = findings_of(CHECKS["FsdpExposedCheck"], cuda)
    assert f.title.endswith("last block resharded") and "also no prefetch" in f.fix
    assert "host time inside the calls" in f.evidence and "set_modules_to_forward_prefetch" in f.fix
    (f,) = findings_of(CHECKS["ReplicatedStateCheck"], CASES["ReplicatedStateCheck"][0])
    # 400 MiB replicated over 2 ranks: 200 MiB each, plus a 50 MiB block gathered while it computes
    assert "= 400.0 MiB, 88.9% of its accounted memory" in f.evidence and "each would hold 200.0 MiB" in f.evidence
    assert f.impact_bytes == 150 * MIB and f.severity == "low" and "Recipe(strategy='fsdp2')" in f.fix
    reason, _ = run_check(CHECKS["ReplicatedStateCheck"], observations(distributed=_job(_rank(0, shard=_shard()))))
    assert reason == "the model is sharded already (fsdp2)"


def test_no_sync_finding_gives_the_measured_rounds_and_saving():
    # rank 0 also waits for a late rank 1: only the transfer (rank 1's 20 ms) is saved by no_sync
    job = _job(_rank(0, reductions=[4] * 5, backwards=[4] * 5, reduction_waits=[0.08] * 5),
               _rank(1, reductions=[4] * 5, backwards=[4] * 5, reduction_waits=[0.02] * 5))
    (f,) = findings_of(CHECKS["DdpNoSyncCheck"], observations(distributed=job))
    assert "4 times per optimizer step" in f.title
    assert f.impact_seconds == pytest.approx(0.015) and f.impact_share == pytest.approx(0.15)


# -- probes: their skip decision is made on the plain observations --------------------


def test_probe_skip_reasons():
    p = {c.tip: c() for c in PROBES.values()}
    assert set(p) == {"PIT104", "PIT108", "PIT301", "PIT501", "PIT601"}, "a new probe: add its skip cases here"
    assert p["PIT108"].skip_reason(observations(models=[model()], cpu=LOADED, settings=TWO_CORES)) is None
    assert "fit" in p["PIT108"].skip_reason(observations(models=[model()], cpu=QUIET, settings=TWO_CORES))
    assert "fit" in p["PIT108"].skip_reason(observations(models=[model()], cpu=LOADED,
                                                          settings={"num_threads": 1, "cpu_cores": 2}))
    assert "CUDA" in p["PIT108"].skip_reason(observations(device="cuda", models=[model()], cpu=LOADED))
    assert "not compiled" in p["PIT601"].skip_reason(observations(models=[model()]))
    assert p["PIT601"].skip_reason(observations(compile={"compiled": True})) is None
    assert p["PIT104"].skip_reason(observations(models=[model(conv2d=2)])) is None
    assert "Conv2d" in p["PIT104"].skip_reason(observations(models=[model()]))
    assert "channels_last" in p["PIT104"].skip_reason(observations(models=[model(conv2d=2)],
                                                                    kernels={"conv_channels_last": 4}))
    assert p["PIT301"].skip_reason(observations(models=[model()])) is None
    assert "autocast" in p["PIT301"].skip_reason(observations(models=[model()],
                                                             forwards={"autocast": {"bfloat16": 5}}))
    assert "float16" in p["PIT301"].skip_reason(observations(models=[model(param_dtype="float16")]))
    assert "model" in p["PIT301"].skip_reason(observations())
    assert p["PIT501"].skip_reason(observations(optimizers=[optimizer()])) is None
    assert "optimizer" in p["PIT501"].skip_reason(observations())


def test_graph_growth_while_torch_compile_builds_graphs_is_not_pit202():
    growing = {"nodes": [10, 40, 70], "steps": [0, 2, 4], "live_losses": 0, "losses_tracked": 5}
    compiling = {"compiled": True, "compile_s": 3.0, "compile_s_observed": 1.0}
    assert findings_of(CHECKS["RetainedGraphCheck"], observations(graph=growing, compile=compiling)) == []
    kept = {**growing, "live_losses": 4}  # the script's own losses kept: still reported
    assert findings_of(CHECKS["RetainedGraphCheck"], observations(graph=kept, compile=compiling))


def test_pit108_takes_the_probe_s_verdict_and_otherwise_the_measured_wait():
    """The thread count that fits the cores left; the measured wait as impact without a probe;
    with one, its lower bound decides (a side-by-side step that is not faster: no finding)."""
    from pitstop.tips.pit108_cpu_threads import threads_that_fit

    assert threads_that_fit(2, 1.3) == 1 and threads_that_fit(2, 0.05) == 2 and threads_that_fit(8, 2.0, 1.0, 2) == 3
    assert threads_that_fit(2, 3.5) == 1  # never below one thread
    check = CHECKS["CpuThreadsCheck"]
    (f,) = findings_of(check, observations(cpu=LOADED, settings=TWO_CORES))
    assert f.impact_share == pytest.approx(0.4) and f.severity == "medium"  # an upper bound until measured
    assert "set_num_threads(1)" in f.fix and "40.0%" in f.evidence and "1.3 cores" in f.evidence
    faster = observations(cpu=LOADED, settings=TWO_CORES, probes={"threads": probe("2 threads", "1 threads", 2.5)})
    (g,) = findings_of(check, faster)
    assert g.impact_share == pytest.approx((0.04 + 0.04 + 0.01) / 0.1 * (1 - 1 / 2.5)) and "2.50x" in g.evidence
    assert g.severity == "high"
    same = observations(cpu=LOADED, settings=TWO_CORES, probes={"threads": probe("2 threads", "1 threads", 0.95)})
    assert findings_of(check, same) == []
    # one busy thread (tiny ops never reach the intra-op pool): fewer threads cannot help
    assert findings_of(check, observations(cpu={**LOADED, "threads_busy": 1}, settings=TWO_CORES)) == []
    # threads that fit the cores, or a wait that has no cause here (no oversubscription, no other load): none
    assert findings_of(check, observations(cpu={**LOADED, "others_cores": 0.1},
                                           settings={"num_threads": 2, "cpu_cores": 4})) == []


def test_evaluation_with_autograd_that_costs_under_the_medium_bar_is_low():
    check = CHECKS["InferenceModeCheck"]
    grad = {"eval_with_grad": 13, "where": {"eval_with_grad": "solver.py:67"}}
    (small,) = [f for f in findings_of(check, observations(forwards=grad, breakdown={"eval": 0.0005}))
                if "graphs" in f.title]
    (large,) = [f for f in findings_of(check, observations(forwards=grad, breakdown={"eval": 0.02}))
                if "graphs" in f.title]
    assert small.severity == "low" and large.severity == "medium"
